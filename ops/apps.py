from django.apps import AppConfig


class OpsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "ops"
    verbose_name = "Operations"

    def ready(self) -> None:
        from ops import schedule

        schedule.connect()
