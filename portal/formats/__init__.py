"""Django's format overrides (``FORMAT_MODULE_PATH``): the portal's one way to write a date
and a time, for what Django writes itself (the admin's lists and forms)."""
