"""Kubernetes name formats (k8s.io/apimachinery validation), one definition for every rule
and validator that checks a name. Patterns are for ``fullmatch``; lengths are the caller's."""

from __future__ import annotations

import re

__all__ = ["DNS1123_LABEL", "DNS1123_SUBDOMAIN", "DNS1035_LABEL", "DNS1035_PREFIX", "QUALIFIED_NAME",
           "LABEL_VALUE", "HTTP_PATH"]

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"

DNS1123_LABEL = re.compile(_LABEL)                          # at most 63 characters
DNS1123_SUBDOMAIN = re.compile(rf"{_LABEL}(\.{_LABEL})*")   # at most 253
DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")   # at most 63
DNS1035_PREFIX = re.compile(r"[a-z][-a-z0-9]*")             # a generateName: the suffix ends it
QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")   # a label key's name part
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")  # at most 63, may be empty
HTTP_PATH = re.compile(r"[A-Za-z0-9/\-._~%!$&'()*+,;=:]+")  # the characters of an HTTP path
