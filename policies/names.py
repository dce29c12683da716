"""Kubernetes name formats (k8s.io/apimachinery validation), one definition for every rule
and validator that checks a name. Patterns are for ``fullmatch``; lengths are the caller's."""

from __future__ import annotations

import re

__all__ = ["DNS1123_LABEL", "DNS1123_SUBDOMAIN", "DNS1035_LABEL", "DNS1035_PREFIX", "QUALIFIED_NAME",
           "LABEL_VALUE", "HTTP_PATH", "qualified_name_problem", "is_qualified_name", "is_native_resource",
           "is_extended_resource"]

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"

DNS1123_LABEL = re.compile(_LABEL)                          # at most 63 characters
DNS1123_SUBDOMAIN = re.compile(rf"{_LABEL}(\.{_LABEL})*")   # at most 253
DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")   # at most 63
DNS1035_PREFIX = re.compile(r"[a-z][-a-z0-9]*")             # a generateName: the suffix ends it
QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")   # a label key's name part
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")  # at most 63, may be empty
HTTP_PATH = re.compile(r"[A-Za-z0-9/\-._~%!$&'()*+,;=:]+")  # the characters of an HTTP path


def qualified_name_problem(name: str) -> str:
    """Why ``name`` is not a qualified name (an optional DNS-subdomain prefix and ``/``, then at
    most 63 alphanumerics, ``-``, ``_`` and ``.``, alphanumeric at both ends: label and annotation
    keys, resource names; IsQualifiedName upstream), or ""."""
    parts = name.split("/")
    if len(parts) > 2:
        return "has more than one '/'"
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            return "has an empty prefix"
        if len(prefix) > 253 or not DNS1123_SUBDOMAIN.fullmatch(prefix):
            return "has a prefix that is not a DNS subdomain"
    last = parts[-1]
    if not last or len(last) > 63 or not QUALIFIED_NAME.fullmatch(last):
        return "is not a qualified name"
    return ""


def is_qualified_name(name: str) -> bool:
    """Whether ``name`` is a qualified name (see :func:`qualified_name_problem`)."""
    return not qualified_name_problem(name)


def is_native_resource(name: str) -> bool:
    """A resource Kubernetes defines (``cpu``, ``kubernetes.io/...``): IsNativeResource upstream."""
    return "/" not in name or "kubernetes.io/" in name


def is_extended_resource(name: str) -> bool:
    """An extended resource (``nvidia.com/gpu``): named with a domain outside ``kubernetes.io``,
    not a quota name, and a qualified name once ``requests.`` is put before it
    (IsExtendedResourceName upstream). Counted in whole units, never overcommitted."""
    if is_native_resource(name) or name.startswith("requests."):
        return False
    return not qualified_name_problem("requests." + name)
