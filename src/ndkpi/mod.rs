//! The NDKPI ABI (shared/reference/ndkpi.md §1–4, Appendix A).
