"""Ingest pages and API routes."""

from django.urls import URLPattern, URLResolver

api_urlpatterns: list[URLPattern | URLResolver] = []

urlpatterns: list[URLPattern | URLResolver] = []
