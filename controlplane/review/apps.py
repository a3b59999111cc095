from django.apps import AppConfig


class ReviewConfig(AppConfig):
    name = "controlplane.review"
    label = "review"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # lazy: Django app loading (models are importable only once every app is loaded)
        from controlplane.review.selectors import run_judge_warnings
        from controlplane.runs.selectors import run_warnings_wanted

        # A run's page and API detail warn about a judge its domains use that is missing or uncalibrated.
        run_warnings_wanted.connect(lambda sender, run, **kw: run_judge_warnings(run), weak=False,
                                    dispatch_uid="review-run-judge-warnings")
