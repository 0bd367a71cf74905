"""Messaging stores behind one narrow, batch-oriented port (see :mod:`sodalite.store.port`)."""
