"""A worker lives through a broker outage: it reconnects, keeps its finished work, serves new tasks.

The broker is a Redis of the test's own behind a proxy the test cuts (tests/faults.py): every
connection is reset and new ones are refused, as when Redis restarts or the network drops.
"""
from __future__ import annotations

import pytest
from celery import Celery
from celery.exceptions import TimeoutError as CeleryTimeout
from django.db import connection
from kombu import Connection

from tests.faults import CuttableProxy, private_redis
from tests.services import require_postgres, start_celery_worker, wait_for, worker_env
from workers import broker


def test_a_closed_connections_channel_raises_a_connection_error(tmp_path):
    """The kombu crash of issue #16: a channel of a closed connection asked for a Redis client
    raised AttributeError (unrecoverable for Celery); with the guard it is a connection error,
    which Celery recovers from."""
    broker.install_kombu_guard()
    with private_redis(tmp_path) as port:
        conn = Connection(f"redis://127.0.0.1:{port}/0")
        channel = conn.channel()
        errors = conn.connection_errors
        conn.close()
        with pytest.raises(broker.ClosedBrokerConnection) as caught:
            with channel.conn_or_acquire() as client:
                client.ping()
        assert isinstance(caught.value, errors)


def _log_count(path, text: str) -> int:
    return path.read_text(errors="replace").count(text) if path.exists() else 0


def _result(result, log, timeout: float = 60):
    """The task's result; a timeout says what the worker logged."""
    try:
        return result.get(timeout=timeout)
    except CeleryTimeout as exc:
        tail = log.read_text(errors="replace")[-6000:] if log.exists() else "(no worker log)"
        raise AssertionError(f"no result for task {result.id} within {timeout} s; the worker's log ends:\n{tail}") from exc


@pytest.mark.slow
@pytest.mark.services
@pytest.mark.django_db(transaction=True)
def test_worker_reconnects_after_the_broker_is_cut_and_serves_new_tasks(tmp_path):
    require_postgres()
    with private_redis(tmp_path) as port, CuttableProxy(port) as proxy:
        # The worker reaches Redis through the proxy; the test's own client goes around it.
        env = worker_env(connection.settings_dict, f"redis://127.0.0.1:{proxy.port}/0", TEMPER_VAR_DIR=str(tmp_path / "var"))
        log = tmp_path / "verify.log"
        worker = start_celery_worker(env, "verify", "verify", concurrency=2, log_path=log, app="tests.workers.broker_app")
        direct = f"redis://127.0.0.1:{port}/0"
        client = Celery("broker-outage-test", broker=direct, backend=direct)
        try:
            started = tmp_path / "sleep-started"
            in_flight = client.send_task("tests.sleep", args=[3.0, str(started)], queue="verify")
            # Cut once the task runs in a pool process: a message the worker has received but not
            # yet handed to its pool goes back to Redis's unacknowledged set when the connection
            # drops, to be delivered again after the visibility timeout, not during this test.
            wait_for(started.exists, 60, "the worker to start the sleeping task", logs=[log])
            proxy.cut()
            # Hold the outage until the worker has failed to reconnect twice (a few seconds).
            wait_for(lambda: _log_count(log, "Cannot connect to redis://") >= 2, 60,
                     "the worker to retry its broker connection twice", logs=[log])
            assert worker.poll() is None, "the worker exited during the outage"
            proxy.restore()
            wait_for(lambda: _log_count(log, "Connected to redis://") >= 1, 60, "the worker to reconnect", logs=[log])
            # The task that finished during the outage kept its result (stored once Redis was back).
            assert _result(in_flight, log) == 3.0
            # And the worker serves new work.
            assert _result(client.send_task("temper.control.ping", args=[41], queue="verify"), log) == 42
            assert worker.poll() is None
            assert "Unrecoverable error" not in log.read_text(errors="replace")
        finally:
            client.close()
            worker.terminate()
            worker.wait(timeout=60)
