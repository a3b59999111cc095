from django.apps import AppConfig


class ReviewConfig(AppConfig):
    name = "controlplane.review"
    label = "review"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # lazy: Django app loading (models are importable only once every app is loaded)
        from controlplane.domains.services import judges_visible_wanted
        from controlplane.review.selectors import judges_visible, run_foreign_judges, run_judge_warnings
        from controlplane.runs.preflight import run_preflight_wanted
        from controlplane.runs.selectors import run_warnings_wanted

        # A run's page and API detail warn about a judge its domains use that is missing or uncalibrated.
        run_warnings_wanted.connect(lambda sender, run, **kw: run_judge_warnings(run), weak=False,
                                    dispatch_uid="review-run-judge-warnings")
        # A worker refuses to start a run whose domain names another team's judge.
        run_preflight_wanted.connect(lambda sender, run, domains, pins, **kw: run_foreign_judges(domains=domains, pins=pins),
                                     weak=False, dispatch_uid="review-run-foreign-judges")
        # A domain's judge stages may name only judges of the domain's team.
        judges_visible_wanted.connect(lambda sender, team_id, names, **kw: judges_visible(team_id=team_id, names=names),
                                      weak=False, dispatch_uid="review-domain-judges-visible")
