//! The NDIS side of an NDK provider (shared/reference/ndkpi.md §6).
