"""Root URLs: pages per app, the REST API under /api/v1/, the OpenAPI schema and docs."""

from csp.decorators import csp_update
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponsePermanentRedirect, JsonResponse
from django.templatetags.static import static
from django.urls import include, path, re_path
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.views import (
    SpectacularAPIView,
    SpectacularRedocView,
    SpectacularSwaggerSplitView,
)

from catalog import urls as catalog_urls
from catalog import views as catalog_views
from graph import urls as graph_urls
from ingest import urls as ingest_urls
from ops import api as ops_api
from ops import views as ops_views
from privacy import urls as privacy_urls


@csrf_exempt
def api_not_found(request: HttpRequest) -> JsonResponse:
    """Unknown API paths answer in the API's error shape, not with an HTML page."""
    return JsonResponse({"error": f"No API endpoint at {request.path}", "field": None}, status=404)


def favicon(request: HttpRequest) -> HttpResponsePermanentRedirect:
    """Where browsers and tools look for an icon without a page naming one (the API docs)."""
    return HttpResponsePermanentRedirect(static("img/favicon.svg"))


swagger = SpectacularSwaggerSplitView.as_view(url_name="api-schema")
SWAGGER_POLICY = {"style-src": ["'self'", "'unsafe-inline'"]}
redoc = SpectacularRedocView.as_view(url_name="api-schema")
# No other site: the page's template loads no web fonts, and Redoc's logo (from its CDN) is
# refused, which Redoc answers by drawing its "API docs by Redocly" link without it.
REDOC_POLICY = {
    "script-src": ["'self'", "'unsafe-inline'"],
    "style-src": ["'self'", "'unsafe-inline'"],
    "worker-src": ["'self'", "blob:"],
}

urlpatterns = [
    path("favicon.ico", favicon),
    path("healthz", ops_views.healthz, name="healthz"),
    path("readyz", ops_views.readyz, name="readyz"),
    path("metrics", ops_views.prometheus, name="metrics"),
    path("health/", ops_views.health, name="health"),
    path("health/runbooks", ops_views.runbooks, name="runbooks"),
    path("health/notices", ops_views.notices, name="notices"),
    path("api/v1/slis", ops_api.SliView.as_view(), name="api-slis"),
    path("admin/", admin.site.urls),
    path("accounts/login/", catalog_views.SignInView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    # The Swagger UI's set-up script is a file of its own (the split view): its page runs no
    # inline script, only inline styles; Redoc's page has an inline script and styles, and
    # builds its search worker.
    path("api/docs/", csp_update(SWAGGER_POLICY)(swagger), name="api-docs"),
    path("api/redoc/", csp_update(REDOC_POLICY)(redoc), name="api-redoc"),
    path("api/v1/", include(ingest_urls.api_urlpatterns)),
    path("api/v1/", include(graph_urls.api_urlpatterns)),
    path("api/v1/", include(privacy_urls.api_urlpatterns)),
    path("api/v1/", include(catalog_urls.api_urlpatterns)),
    path("", include(ingest_urls.urlpatterns)),
    path("", include(graph_urls.urlpatterns)),
    path("", include(privacy_urls.urlpatterns)),
    path("", include(catalog_urls.urlpatterns)),
    re_path(r"^api/", api_not_found),
]

handler400 = "catalog.errors.bad_request"
handler403 = "catalog.errors.permission_denied"
handler404 = "catalog.errors.page_not_found"
handler500 = "catalog.errors.server_error"
