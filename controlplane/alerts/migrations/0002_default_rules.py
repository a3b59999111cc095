"""The default rules every run is watched by (team empty; platform admins edit them): in-app
notifications to the run's team. The ones whose right bound depends on the model (KL, entropy,
logprob mismatch) ship switched off, to be tuned and switched on."""
from django.db import migrations

DEFAULTS = [
    {"name": "Reward collapse", "condition": "drop", "metric": "reward/*", "threshold": 0.3, "window": 10},
    {"name": "Infrastructure errors", "condition": "above", "metric": "infra_rate/*", "threshold": 0.25, "window": 3},
    {"name": "Run stalled", "condition": "stalled", "threshold": 20.0},
    {"name": "Run failed, domain quarantined or reward hacking", "condition": "event",
     "events": ["failed", "quarantine", "reward_hacking"]},
    {"name": "KL spike", "condition": "above", "metric": "policy/kl", "threshold": 0.5, "window": 3, "enabled": False},
    {"name": "Entropy collapse", "condition": "below", "metric": "policy/entropy", "threshold": 0.05, "window": 5,
     "enabled": False},
    {"name": "Logprob mismatch", "condition": "above", "metric": "mismatch/kl", "threshold": 0.05, "window": 3,
     "enabled": False},
]


def create(apps, schema_editor):
    AlertRule = apps.get_model("alerts", "AlertRule")
    for rule in DEFAULTS:
        AlertRule.objects.create(team=None, channels=[{"type": "in_app"}], **rule)


def remove(apps, schema_editor):
    apps.get_model("alerts", "AlertRule").objects.filter(team=None, name__in=[r["name"] for r in DEFAULTS]).delete()


class Migration(migrations.Migration):
    dependencies = [("alerts", "0001_initial")]
    operations = [migrations.RunPython(create, remove)]
