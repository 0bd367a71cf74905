"""Applications written the way each library's users write them, run by the library's own worker command.

The interop tests in ``tests/interop/test_integrations_*.py`` start these against a Sodalite broker
(docs/integrations.md shows the same setup from the user's side). They read where the broker is from
environment variables, as deployed applications do.
"""
