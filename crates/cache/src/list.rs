//! Intrusive doubly-linked lists over slot indices (no allocation per operation): the 2Q
//! queues of a shard. A slot is on at most one list at a time.

/// "No slot".
pub(crate) const NIL: u32 = u32::MAX;

/// The links a slot carries.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Links {
    pub prev: u32,
    pub next: u32,
}

impl Links {
    pub const UNLINKED: Links = Links {
        prev: NIL,
        next: NIL,
    };
}

/// Something that stores the links of slot `index`.
pub(crate) trait LinkStore {
    fn links(&mut self, index: u32) -> &mut Links;
}

/// One list: most recent at the head, eviction candidate at the tail.
#[derive(Debug)]
pub(crate) struct List {
    head: u32,
    tail: u32,
    len: usize,
}

impl List {
    pub fn new() -> Self {
        List {
            head: NIL,
            tail: NIL,
            len: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The tail (least recent), if any.
    pub fn back(&self) -> Option<u32> {
        (self.tail != NIL).then_some(self.tail)
    }

    pub fn push_front(&mut self, store: &mut impl LinkStore, index: u32) {
        assert!(index != NIL);
        let old_head = self.head;
        *store.links(index) = Links {
            prev: NIL,
            next: old_head,
        };
        if old_head == NIL {
            assert!(self.tail == NIL && self.len == 0);
            self.tail = index;
        } else {
            store.links(old_head).prev = index;
        }
        self.head = index;
        self.len += 1;
    }

    /// Unlinks `index`, which must be on this list.
    pub fn remove(&mut self, store: &mut impl LinkStore, index: u32) {
        assert!(self.len > 0, "removing slot {index} from an empty list");
        let Links { prev, next } = *store.links(index);
        if prev == NIL {
            assert!(self.head == index, "slot {index} is not on this list");
            self.head = next;
        } else {
            store.links(prev).next = next;
        }
        if next == NIL {
            assert!(self.tail == index, "slot {index} is not on this list");
            self.tail = prev;
        } else {
            store.links(next).prev = prev;
        }
        *store.links(index) = Links::UNLINKED;
        self.len -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Store(Vec<Links>);
    impl LinkStore for Store {
        fn links(&mut self, index: u32) -> &mut Links {
            &mut self.0[index as usize]
        }
    }

    fn collect(list: &List, store: &mut Store) -> Vec<u32> {
        let mut out = Vec::new();
        let mut at = list.head;
        while at != NIL {
            out.push(at);
            at = store.links(at).next;
        }
        out
    }

    #[test]
    fn push_remove_keep_order() {
        let mut store = Store(vec![Links::UNLINKED; 5]);
        let mut list = List::new();
        for i in 0..5 {
            list.push_front(&mut store, i);
        }
        assert_eq!(collect(&list, &mut store), [4, 3, 2, 1, 0]);
        list.remove(&mut store, 2);
        list.remove(&mut store, 4);
        list.remove(&mut store, 0);
        assert_eq!(collect(&list, &mut store), [3, 1]);
        assert_eq!(list.back(), Some(1));
        assert_eq!(list.len(), 2);
        list.remove(&mut store, 1);
        list.remove(&mut store, 3);
        assert!(list.is_empty());
        assert_eq!(list.back(), None);
    }
}
