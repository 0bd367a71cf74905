"""Management plane: the AdminService and its HTTP (ATOM/XML) face."""
