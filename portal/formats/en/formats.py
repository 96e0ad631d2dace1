"""Dates and times as every page writes them (``core.timezones.written``,
``{{ when|utc }}``): ``2026-12-01 03:10 UTC``, in the viewer's zone, named. Django's own
English formats ("Dec. 1, 2026, 3:10 a.m.", no zone) would otherwise show in the admin."""

DATETIME_FORMAT = "Y-m-d H:i T"
SHORT_DATETIME_FORMAT = "Y-m-d H:i T"
DATE_FORMAT = "Y-m-d"
SHORT_DATE_FORMAT = "Y-m-d"
TIME_FORMAT = "H:i"
