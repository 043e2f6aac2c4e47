//! PVRDMA hardware layer.
