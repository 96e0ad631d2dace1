"""``GET /api/v1/version/``: which portal answers (``gpuctl version`` shows it next to its own).

The same figures as the ``gpuportal_build_info`` metric: the installed package's version,
``BUILD_REVISION`` from the environment and the API's version.
"""

from __future__ import annotations

import importlib.metadata
import os

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

API_VERSION = "v1"


def portal_version() -> str:
    """The installed ``gpu-portal`` package's version, or ``unknown``."""
    try:
        return importlib.metadata.version("gpu-portal")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


class VersionSerializer(serializers.Serializer):
    version = serializers.CharField()
    revision = serializers.CharField(allow_blank=True)
    api = serializers.CharField()


class VersionView(APIView):
    """The portal's version (anyone signed in)."""

    @extend_schema(responses={200: VersionSerializer})
    def get(self, request: Request) -> Response:
        return Response(
            {
                "version": portal_version(),
                "revision": os.environ.get("BUILD_REVISION", ""),
                "api": API_VERSION,
            }
        )
