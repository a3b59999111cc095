"""RL health on by default: each default rule carries advice (what its threshold is, where it comes
from, what to try) sent with every firing; the KL, entropy and logprob-mismatch rules are switched
on; importance-weight, effective-sample-size and truncation rules are added. A team adjusts one for
its own runs with a rule of the same name (controlplane.alerts.services.rules_for)."""
from django.db import migrations, models

ADVICE = {
    "Reward collapse": (
        "The reward's EMA fell 0.3 below its best within one curriculum level. Look at the trajectories "
        "around the step: a verifier change, a new level or a policy that stopped answering. Try: a lower "
        "learning rate, a smaller clip range, or resuming from the last good checkpoint."),
    "Infrastructure errors": (
        "More than a quarter of the domain's completions ended in a sandbox, timeout or worker error: "
        "they are masked out of the update, so the domain trains on what is left. Look at the queue page "
        "and the verify workers' logs."),
    "KL spike": (
        "policy/kl is the KL to the reference model (kept when algorithm.kl_coef > 0). Above 0.5 over 3 "
        "steps the policy moved far from where it started in a few updates (Temper's default bound). "
        "Try: a lower learning rate, a larger kl_coef, or a smaller clip_high."),
    "Entropy collapse": (
        "The sampled policy's mean token entropy is below 0.05 nats: it has become near-deterministic, "
        "exploration stops and GRPO groups stop giving signal. Try: a higher rollout temperature, "
        "clip_high above clip_low (DAPO's clip-higher), or a lower learning rate."),
    "Logprob mismatch": (
        "mismatch/kl is the token-level KL between the logprobs the engine sampled with and the "
        "trainer's for the same tokens, before the update. Above 0.05 the engine samples another "
        "policy than the one trained (verl's rollout-correction notes tie a growing mismatch to "
        "collapse). Try: check the weight sync, use the same dtype in engine and trainer, and lower "
        "staleness."),
}

IS_ADVICE = ("The mean importance weight of the trained policy against the sampling engine is {} (verl's "
             "rollout_is metrics document a healthy mean of 0.5 to 2.0). Try: lower staleness, sync weights every "
             "step, and check that the engine samples at the trainer's temperature.")

NEW = [
    {"name": "Importance weights high", "condition": "above", "metric": "health/is_weight_mean", "threshold": 2.0,
     "window": 3, "advice": IS_ADVICE.format("above 2.0")},
    {"name": "Importance weights low", "condition": "below", "metric": "health/is_weight_mean", "threshold": 0.5,
     "window": 3, "advice": IS_ADVICE.format("below 0.5")},
    {"name": "Effective sample size low", "condition": "below", "metric": "health/ess", "threshold": 0.3,
     "window": 3, "advice": (
         "The normalised effective sample size of the importance weights is below 0.3 (verl documents "
         "ESS > 0.3 as healthy): a few tokens carry the update. Try: lower staleness, a smaller learning "
         "rate, or truncated importance sampling.")},
    # Over 10 steps: a step's batch is tens of completions, where 5% is one or two of them.
    {"name": "Truncated completions", "condition": "above", "metric": "response/truncated_frac", "threshold": 0.05,
     "window": 10, "advice": (
         "More than 5% of completions over 10 steps stopped at rollout.max_new_tokens without an end of "
         "sequence (AReaL documents a no-EOS ratio below 0.05 as healthy): they get no clean reward and "
         "bias the policy's length. Try: a larger rollout.max_new_tokens, or a length penalty.")},
]
SWITCHED_ON = ("KL spike", "Entropy collapse", "Logprob mismatch")


def forward(apps, schema_editor):
    AlertRule = apps.get_model("alerts", "AlertRule")
    for name, advice in ADVICE.items():
        AlertRule.objects.filter(team=None, name=name, advice="").update(advice=advice)
    AlertRule.objects.filter(team=None, name__in=SWITCHED_ON).update(enabled=True)
    for rule in NEW:
        if not AlertRule.objects.filter(team=None, name=rule["name"]).exists():
            AlertRule.objects.create(team=None, channels=[{"type": "in_app"}], **rule)


def backward(apps, schema_editor):
    AlertRule = apps.get_model("alerts", "AlertRule")
    AlertRule.objects.filter(team=None, name__in=[r["name"] for r in NEW]).delete()
    AlertRule.objects.filter(team=None, name__in=SWITCHED_ON).update(enabled=False)


class Migration(migrations.Migration):
    dependencies = [("alerts", "0002_default_rules")]
    operations = [
        migrations.AddField(
            model_name="alertrule", name="advice",
            field=models.CharField(blank=True, max_length=2000,
                                   help_text="What the threshold is, where it comes from and what to try: sent with every firing.")),
        migrations.RunPython(forward, backward),
    ]
