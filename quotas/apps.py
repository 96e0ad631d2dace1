from django.apps import AppConfig


class QuotasConfig(AppConfig):
    name = "quotas"
    verbose_name = "Quotas and business lines"
