# The run's staleness takes its default, help and bounds from the trainer's rollout.staleness
# (trainer/config.py); the database now holds the upper bound as well as the lower one.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0003_metric_buckets'),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name='run',
            name='run_staleness_gte_0',
        ),
        migrations.AlterField(
            model_name='run',
            name='staleness',
            field=models.IntegerField(default=0, help_text='Steps that generation may run ahead of the update (0 = synchronous).'),
        ),
        migrations.AddConstraint(
            model_name='run',
            constraint=models.CheckConstraint(condition=models.Q(('staleness__gte', 0), ('staleness__lte', 16)), name='run_staleness_in_bounds'),
        ),
    ]
