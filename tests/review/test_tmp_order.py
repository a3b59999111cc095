import json
from tests.review.test_api import client_for, post
from controlplane.review.models import ReviewItem
import pytest
pytestmark = pytest.mark.django_db

def test_order(judged):
    w = judged
    q = post(client_for(w.users["admin"]), "/api/review/queues", {"team": "acme", "domain": "capitals", "judge": "sim", "name": "o", "size": 30, "strategy": "stratified"}).json()
    rev = client_for(w.users["reviewer"])
    nxt = f"/api/review/queues/{q['id']}/next"
    cur = post(rev, nxt).json()["item"]
    up = post(rev, f"{nxt}?exclude={cur['id']}").json()["item"]
    seq = []
    for i in range(10):
        seq.append(cur["position"])
        done, cur = cur, up
        up = post(rev, f"{nxt}?exclude={cur['id']},{done['id']}").json()["item"]
        post(rev, f"/api/review/items/{done['id']}/label", {"value": 1})
    print("SEQ", seq)
