from django.apps import AppConfig


class PrivacyConfig(AppConfig):
    name = "privacy"
    default_auto_field = "django.db.models.BigAutoField"
