"""Management plane: the control-plane service (control.py) and its faces: ATOM/XML, the JSON API, the console."""
