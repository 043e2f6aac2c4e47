//! A consumer's array as NDKPI passes it — a pointer and a declared count — before the
//! provider has checked that count against the limit the call has for it.
//!
//! NDKPI says the pointer is valid for the declared count, but a careless consumer may declare
//! more entries than it passed (an nSge above MaxInitiatorRequestSge with a one-entry array, an
//! AdapterPageCount above the MR's capacity). Such a call must fail with its documented status,
//! and forming a `&[T]` of the declared length first would already be undefined behaviour. So no
//! slice exists until the count has passed its check: [`ConsumerArray::within`] (a limit) and
//! [`ConsumerArray::fewer_than`] (the QP's admission word, which already bounds the count on
//! the hot post path: no second compare) check it and form the slice.

use core::marker::PhantomData;
use core::ptr::NonNull;

/// A consumer's array of `T` whose length has not been checked yet.
#[derive(Debug)]
pub struct ConsumerArray<'a, T> {
    ptr: NonNull<T>,
    len: usize,
    _array: PhantomData<&'a [T]>,
}

impl<T> Clone for ConsumerArray<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for ConsumerArray<'_, T> {}

impl<'a, T> ConsumerArray<'a, T> {
    /// No entries.
    pub const fn empty() -> Self {
        Self {
            ptr: NonNull::dangling(),
            len: 0,
            _array: PhantomData,
        }
    }

    /// The consumer's `len` entries at `ptr`; `None` for a null pointer with entries.
    ///
    /// # Safety
    /// If `len` is within the limit the provider checks for this array, `ptr` is aligned and
    /// valid for reads of `len` entries of `T` for `'a`, and they are initialized (NDKPI's
    /// contract for the call). Nothing is read, nor any slice formed, before that check.
    #[inline(always)]
    pub unsafe fn new(ptr: *const T, len: usize) -> Option<Self> {
        if len == 0 {
            return Some(Self::empty());
        }
        NonNull::new(ptr.cast_mut()).map(|ptr| Self {
            ptr,
            len,
            _array: PhantomData,
        })
    }

    /// An array the provider itself owns (tests and internal callers).
    pub fn from_slice(s: &'a [T]) -> Self {
        Self {
            ptr: NonNull::from(s).cast(),
            len: s.len(),
            _array: PhantomData,
        }
    }

    /// The declared count (a number only: nothing is read).
    #[inline(always)]
    pub const fn len(&self) -> usize {
        self.len
    }

    /// Whether the declared count is 0.
    #[inline(always)]
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The entries, if the declared count is at most `max`.
    #[inline(always)]
    pub fn within(self, max: usize) -> Option<&'a [T]> {
        if self.len > max {
            return None;
        }
        // SAFETY: the count passed its limit, so `new`'s contract makes `ptr` valid for
        // `len` initialized entries for `'a` (or `len` is 0 and `ptr` dangling, aligned).
        Some(unsafe { self.admitted() })
    }

    /// The entries, if the declared count is below `bound` (an admission word that is the
    /// limit plus one, or 0 to refuse any count).
    #[inline(always)]
    pub fn fewer_than(self, bound: u64) -> Option<&'a [T]> {
        if self.len as u64 >= bound {
            return None;
        }
        // SAFETY: the count is below its bound, so `new`'s contract makes `ptr` valid for
        // `len` initialized entries for `'a`.
        Some(unsafe { self.admitted() })
    }

    /// The entries, once the caller has compared the count with its limit.
    ///
    /// # Safety
    /// `self.len()` has been checked against the limit `new`'s contract refers to.
    #[inline(always)]
    unsafe fn admitted(self) -> &'a [T] {
        // SAFETY: the caller checked the count, so by `new`'s contract `ptr` is valid for
        // reads of `len` initialized, aligned entries for `'a`; a 0-length slice of a dangling
        // aligned pointer is valid.
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_null_array_with_entries_is_refused_and_an_empty_one_accepted() {
        // SAFETY: nothing is read from a null pointer: `new` refuses it.
        assert!(unsafe { ConsumerArray::<u64>::new(core::ptr::null(), 3) }.is_none());
        // SAFETY: no entries are declared.
        let e = unsafe { ConsumerArray::<u64>::new(core::ptr::null(), 0) }.expect("empty");
        assert_eq!(e.within(0), Some(&[][..]));
    }

    #[test]
    fn an_array_longer_than_its_limit_forms_no_slice() {
        let one = [7u64];
        // A declared count of 1000 over a one-entry array: refused by the count alone.
        // SAFETY: the count (1000) is above the limit used below, so nothing is read.
        let a = unsafe { ConsumerArray::new(one.as_ptr(), 1000) }.expect("non-null");
        assert_eq!(a.len(), 1000);
        assert_eq!(a.within(16), None);
        let b = ConsumerArray::from_slice(&one);
        assert_eq!(b.within(16), Some(&one[..]));
        assert_eq!(b.within(0), None);
    }
}
