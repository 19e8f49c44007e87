//! The fenced resource: one counter per lock name that every holder increments with a
//! read-modify-write carrying its fencing token, as a storage service that checks fences
//! would. An operation is accepted only with a fence at least as large as the largest one
//! seen, and an accepted exclusive operation raises that mark, reads included: so a holder
//! that read under an old fence cannot write back over a newer holder's increment. Read
//! holds only check their fence (readers share the lock, so they must not push each other
//! out). Lost updates = acknowledged increments the final value does not show.

use std::collections::HashMap;
use std::sync::Mutex;

#[derive(Debug, Default)]
struct Cell {
    value: u64,
    seen: u64,
    acked: u64,
}

#[derive(Debug, Default)]
pub struct Resources {
    cells: Mutex<HashMap<String, Cell>>,
}

impl Resources {
    fn with<T>(&self, name: &str, f: impl FnOnce(&mut Cell) -> T) -> T {
        let mut cells = self.cells.lock().unwrap_or_else(|e| e.into_inner());
        f(cells.entry(name.to_owned()).or_default())
    }

    /// An exclusive holder's read: the value, or the larger fence already seen.
    pub fn read(&self, name: &str, fence: u64) -> Result<u64, u64> {
        self.with(name, |c| {
            if fence < c.seen {
                return Err(c.seen);
            }
            c.seen = fence;
            Ok(c.value)
        })
    }

    /// An exclusive holder's write of `value` (what it read plus one).
    pub fn write(&self, name: &str, fence: u64, value: u64) -> Result<(), u64> {
        self.with(name, |c| {
            if fence < c.seen {
                return Err(c.seen);
            }
            c.seen = fence;
            c.value = value;
            c.acked += 1;
            Ok(())
        })
    }

    /// A reader's check: its fence must not be older than the last exclusive holder's.
    pub fn check(&self, name: &str, fence: u64) -> Result<(), u64> {
        self.with(name, |c| if fence < c.seen { Err(c.seen) } else { Ok(()) })
    }

    /// Per name: (final value, acknowledged increments).
    pub fn totals(&self) -> Vec<(String, u64, u64)> {
        let cells = self.cells.lock().unwrap_or_else(|e| e.into_inner());
        let mut all: Vec<_> = cells
            .iter()
            .map(|(n, c)| (n.clone(), c.value, c.acked))
            .collect();
        all.sort();
        all
    }
}
