//! Handle tables: lowest free integer ≥ a minimum, below the type's `max_*` (M10).
#![deny(unsafe_code)]

/// Objects by handle.
#[derive(Clone, Debug)]
pub struct Table<T> {
    slots: Vec<Option<T>>,
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Self { slots: Vec::new() }
    }
}

impl<T> Table<T> {
    /// Lowest free handle in `[min, max)`.
    pub fn free_handle(&self, min: u32, max: u32) -> Option<u32> {
        (min..max).find(|&h| self.get(h).is_none())
    }

    /// Stores `v` at `h` (which must be free).
    pub fn insert(&mut self, h: u32, v: T) {
        let i = h as usize;
        if self.slots.len() <= i {
            self.slots.resize_with(i + 1, || None);
        }
        self.slots[i] = Some(v);
    }

    /// Object at `h`.
    pub fn get(&self, h: u32) -> Option<&T> {
        self.slots.get(h as usize).and_then(Option::as_ref)
    }

    /// Mutable object at `h`.
    pub fn get_mut(&mut self, h: u32) -> Option<&mut T> {
        self.slots.get_mut(h as usize).and_then(Option::as_mut)
    }

    /// Removes and returns the object at `h`.
    pub fn remove(&mut self, h: u32) -> Option<T> {
        self.slots.get_mut(h as usize).and_then(Option::take)
    }

    /// Handles in use, ascending.
    pub fn handles(&self) -> Vec<u32> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.is_some())
            .map(|(i, _)| i as u32)
            .collect()
    }

    /// (handle, object) pairs.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &T)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|v| (i as u32, v)))
    }

    /// Number of objects.
    pub fn len(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops everything.
    pub fn clear(&mut self) {
        self.slots.clear();
    }
}
