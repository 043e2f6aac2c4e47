//! Bounds-checked handle tables (style.md §10): device-written handles (CQE `qp`, EQE `info`,
//! CQNE `info`) find their objects only through [`HandleTable::get`].
#![deny(unsafe_code)]

use crate::os::alloc::KVec;

use super::error::PvrdmaError;

/// Objects indexed by device handle, `0 ≤ handle < bound`.
pub struct HandleTable<T> {
    slots: KVec<Option<T>>,
}

impl<T> HandleTable<T> {
    /// A table for handles below `bound` (allocated now; PASSIVE_LEVEL).
    ///
    /// # Errors
    ///
    /// [`PvrdmaError::NoMemory`].
    pub fn new(bound: u32) -> Result<Self, PvrdmaError> {
        let mut slots = KVec::try_with_capacity(bound as usize)?;
        for _ in 0..bound {
            slots
                .push_within_capacity(None)
                .map_err(|_| PvrdmaError::NoMemory)?;
        }
        Ok(HandleTable { slots })
    }

    /// Handles must be below this.
    pub fn bound(&self) -> u32 {
        self.slots.len() as u32
    }

    /// The object registered under `handle`, if any.
    pub fn get(&self, handle: u32) -> Option<&T> {
        self.slots.get(handle as usize)?.as_ref()
    }

    /// The object registered under `handle`, if any, to change in place.
    pub fn get_mut(&mut self, handle: u32) -> Option<&mut T> {
        self.slots.get_mut(handle as usize)?.as_mut()
    }

    /// Registers `value` under `handle`.
    ///
    /// # Errors
    ///
    /// [`PvrdmaError::InvalidParameter`] if the handle is out of range or taken (a device that
    /// hands out a live handle twice is not trusted with the second object).
    pub fn insert(&mut self, handle: u32, value: T) -> Result<(), PvrdmaError> {
        match self.slots.get_mut(handle as usize) {
            Some(slot @ None) => {
                *slot = Some(value);
                Ok(())
            }
            _ => Err(PvrdmaError::InvalidParameter),
        }
    }

    /// [`HandleTable::insert`] that hands `value` back when the handle is out of range or
    /// taken (the caller still owns what it stands for).
    ///
    /// # Errors
    ///
    /// `value`.
    pub fn try_put(&mut self, handle: u32, value: T) -> Result<(), T> {
        match self.slots.get_mut(handle as usize) {
            Some(slot @ None) => {
                *slot = Some(value);
                Ok(())
            }
            _ => Err(value),
        }
    }

    /// Unregisters `handle`.
    pub fn remove(&mut self, handle: u32) -> Option<T> {
        self.slots.get_mut(handle as usize)?.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_and_duplicates() {
        let mut t = HandleTable::new(4).unwrap();
        assert_eq!(t.bound(), 4);
        assert_eq!(t.insert(3, 'a'), Ok(()));
        assert_eq!(t.insert(3, 'b'), Err(PvrdmaError::InvalidParameter));
        assert_eq!(t.insert(4, 'c'), Err(PvrdmaError::InvalidParameter));
        assert_eq!(t.get(3), Some(&'a'));
        if let Some(v) = t.get_mut(3) {
            *v = 'd';
        }
        assert_eq!(t.get(3), Some(&'d'));
        assert_eq!(t.get_mut(4), None);
        assert_eq!(t.get(4), None);
        assert_eq!(t.get(u32::MAX), None);
        assert_eq!(t.remove(3), Some('d'));
        assert_eq!(t.get(3), None);
        assert_eq!(t.remove(99), None);
    }
}
