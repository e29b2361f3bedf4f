//! Two-level segregated fit (TLSF) index of address ranges: O(1) alloc and free, splitting
//! and merging of physical neighbours, alignment aware.
//!
//! Ranges live in regions (one per provider block). A range is `Free` (in a bin), `Used`, or
//! `Pending`: freed by a stream whose work may still read it, so it is kept out of the bins
//! (and out of merges) until the stream-ordered layer releases it.

/// Smallest size and alignment handed out; every range is a multiple of it.
pub const UNIT: usize = 256;
const UNIT_LOG: u32 = UNIT.trailing_zeros();
/// Second-level bins per power of two: ranges in one bin differ by at most 1/32 of their size.
const SL_LOG: u32 = 5;
const SL_COUNT: usize = 1 << SL_LOG;
/// Sizes below this share first-level bin 0, split linearly by `UNIT`.
const SMALL_LOG: u32 = UNIT_LOG + SL_LOG;
const FL_COUNT: usize = (usize::BITS - SMALL_LOG + 1) as usize;
/// How many ranges of a bin are compared to pick the best fit (bounds the O(1) cost).
const FIT_SCAN: usize = 8;
const NIL: u32 = u32::MAX;

/// Index of a range in the TLSF.
pub type NodeId = u32;
/// Index of a region (one provider block).
pub type RegionId = u32;

/// Where a free landed: the freed range and the free range it merged into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Freed {
    /// Region of the range.
    pub region: RegionId,
    /// Start of the freed range.
    pub addr: usize,
    /// Bytes of the freed range.
    pub size: usize,
    /// Start of the merged free range.
    pub merged_addr: usize,
    /// Bytes of the merged free range.
    pub merged_size: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Free,
    Used,
    Pending,
}

#[derive(Debug, Clone)]
struct Node {
    addr: usize,
    size: usize,
    region: RegionId,
    state: State,
    prev_phys: NodeId,
    next_phys: NodeId,
    prev_free: NodeId,
    next_free: NodeId,
}

#[derive(Debug, Clone)]
struct Region {
    addr: usize,
    size: usize,
    last: NodeId,
    busy: u32,
}

/// The TLSF index over any number of regions.
#[derive(Debug)]
pub struct Tlsf {
    nodes: Vec<Node>,
    spare_nodes: Vec<NodeId>,
    regions: Vec<Option<Region>>,
    spare_regions: Vec<RegionId>,
    fl_bitmap: u64,
    sl_bitmaps: [u32; FL_COUNT],
    heads: Vec<NodeId>,
    free_bytes: usize,
}

/// First- and second-level bin of a size (a multiple of `UNIT`).
fn mapping(size: usize) -> (usize, usize) {
    if size < (1 << SMALL_LOG) {
        return (0, size >> UNIT_LOG);
    }
    let log = usize::BITS - 1 - size.leading_zeros();
    let fl = (log - SMALL_LOG + 1) as usize;
    let sl = (size >> (log - SL_LOG)) & (SL_COUNT - 1);
    (fl, sl)
}

/// The first bin whose every range holds `size`, or `None` past the largest bin.
fn mapping_search(size: usize) -> Option<(usize, usize)> {
    let rounded = if size < (1 << SMALL_LOG) {
        size
    } else {
        let log = usize::BITS - 1 - size.leading_zeros();
        size.checked_add((1 << (log - SL_LOG)) - 1)?
    };
    let (fl, sl) = mapping(rounded);
    (fl < FL_COUNT).then_some((fl, sl))
}

fn aligned_fit(addr: usize, size: usize, want: usize, align: usize) -> Option<usize> {
    let start = crate::align::align_up(addr, align)?;
    let pad = start - addr;
    (size >= pad && size - pad >= want).then_some(pad)
}

impl Default for Tlsf {
    fn default() -> Self {
        Self::new()
    }
}

impl Tlsf {
    /// An empty index with no regions.
    pub fn new() -> Self {
        Tlsf {
            nodes: Vec::new(),
            spare_nodes: Vec::new(),
            regions: Vec::new(),
            spare_regions: Vec::new(),
            fl_bitmap: 0,
            sl_bitmaps: [0; FL_COUNT],
            heads: vec![NIL; FL_COUNT * SL_COUNT],
            free_bytes: 0,
        }
    }

    /// Adds `[addr, addr + size)` as a free region; `addr` and `size` are multiples of `UNIT`.
    pub fn add_region(&mut self, addr: usize, size: usize) -> RegionId {
        debug_assert!(addr % UNIT == 0 && size % UNIT == 0 && size > 0);
        let region = self.spare_regions.pop().unwrap_or_else(|| {
            self.regions.push(None);
            (self.regions.len() - 1) as RegionId
        });
        let node = self.new_node(addr, size, region, State::Free);
        self.regions[region as usize] = Some(Region {
            addr,
            size,
            last: node,
            busy: 0,
        });
        self.insert_free(node);
        region
    }

    /// Extends a region at its end to `new_size` bytes (the provider grew its block in place).
    pub fn grow_region(&mut self, region: RegionId, new_size: usize) {
        let (last, extra) = {
            let r = self.region(region);
            debug_assert!(new_size >= r.size && new_size % UNIT == 0);
            (r.last, new_size - r.size)
        };
        if extra == 0 {
            return;
        }
        if self.nodes[last as usize].state == State::Free {
            self.remove_free(last);
            self.nodes[last as usize].size += extra;
            self.insert_free(last);
        } else {
            let end = self.nodes[last as usize].addr + self.nodes[last as usize].size;
            let node = self.new_node(end, extra, region, State::Free);
            self.nodes[node as usize].prev_phys = last;
            self.nodes[last as usize].next_phys = node;
            self.region_mut(region).last = node;
            self.insert_free(node);
        }
        self.region_mut(region).size = new_size;
    }

    /// Free bytes at the end of a region, where growth would extend a range: `(start, bytes)`.
    pub fn region_tail(&self, region: RegionId) -> (usize, usize) {
        let r = self.region(region);
        let last = &self.nodes[r.last as usize];
        if last.state == State::Free {
            (last.addr, last.size)
        } else {
            (r.addr + r.size, 0)
        }
    }

    /// Whether no range of the region is used or pending.
    pub fn region_is_empty(&self, region: RegionId) -> bool {
        self.region(region).busy == 0
    }

    /// Start address and size of a region.
    pub fn region_span(&self, region: RegionId) -> (usize, usize) {
        let r = self.region(region);
        (r.addr, r.size)
    }

    /// Removes an empty region from the index, so its block can go back to the provider.
    pub fn remove_region(&mut self, region: RegionId) {
        let last = self.region(region).last;
        debug_assert!(self.region_is_empty(region));
        debug_assert!(self.nodes[last as usize].prev_phys == NIL);
        self.remove_free(last);
        self.spare_nodes.push(last);
        self.regions[region as usize] = None;
        self.spare_regions.push(region);
    }

    /// Finds and takes a free range of `size` bytes (a multiple of `UNIT`) aligned to `align`
    /// (a power of two, at least `UNIT`). Best fit among a few ranges of the exact bin, else
    /// the first range of the next non-empty bin, which always fits.
    pub fn alloc(&mut self, size: usize, align: usize) -> Option<NodeId> {
        let (fl, sl) = mapping(size);
        if let Some(node) = self.best_in_bin(fl * SL_COUNT + sl, size, align) {
            return Some(self.carve(node, size, align));
        }
        let search = size.checked_add(align - UNIT)?;
        let (fl, sl) = mapping_search(search)?;
        let bin = self.find_bin(fl, sl)?;
        let node = self.best_in_bin(bin, size, align)?;
        Some(self.carve(node, size, align))
    }

    /// Takes `size` bytes at `align` from the free range at the end of a region, the one that
    /// growth just extended (the bins alone may miss it: they only promise good fit).
    pub fn alloc_at_tail(&mut self, region: RegionId, size: usize, align: usize) -> Option<NodeId> {
        let last = self.region(region).last;
        let n = &self.nodes[last as usize];
        if n.state != State::Free {
            return None;
        }
        aligned_fit(n.addr, n.size, size, align)?;
        Some(self.carve(last, size, align))
    }

    /// Marks a used range as pending (freed by a stream whose work may still read it).
    pub fn mark_pending(&mut self, node: NodeId) {
        debug_assert_eq!(self.nodes[node as usize].state, State::Used);
        self.nodes[node as usize].state = State::Pending;
    }

    /// Takes `size` bytes aligned to `align` out of a pending range for reuse on the same
    /// stream. Returns the used range and up to two pending leftovers, or `None` if it does not fit.
    pub fn take_pending(
        &mut self,
        node: NodeId,
        size: usize,
        align: usize,
    ) -> Option<(NodeId, [Option<NodeId>; 2])> {
        let n = &self.nodes[node as usize];
        debug_assert_eq!(n.state, State::Pending);
        let pad = aligned_fit(n.addr, n.size, size, align)?;
        let front = (pad > 0).then(|| self.split_front(node, pad, State::Pending));
        let back = self.split_back(node, size, State::Pending);
        self.nodes[node as usize].state = State::Used;
        Some((node, [front, back]))
    }

    /// Address, size and region of a range.
    pub fn node(&self, node: NodeId) -> (usize, usize, RegionId) {
        let n = &self.nodes[node as usize];
        (n.addr, n.size, n.region)
    }

    /// Frees a used or pending range, merging it with free neighbours. Returns its region.
    pub fn free(&mut self, node: NodeId) -> RegionId {
        self.free_range(node).region
    }

    /// Frees a used or pending range like [`Tlsf::free`] and says where: the freed bytes and the
    /// free range they merged into (bounded by busy ranges or the region's ends).
    pub fn free_range(&mut self, node: NodeId) -> Freed {
        let (addr, size) = {
            let n = &self.nodes[node as usize];
            (n.addr, n.size)
        };
        let merged = self.free_merge(node);
        let m = &self.nodes[merged as usize];
        Freed {
            region: m.region,
            addr,
            size,
            merged_addr: m.addr,
            merged_size: m.size,
        }
    }

    fn free_merge(&mut self, node: NodeId) -> NodeId {
        let region = self.nodes[node as usize].region;
        debug_assert_ne!(self.nodes[node as usize].state, State::Free);
        self.nodes[node as usize].state = State::Free;
        self.region_mut(region).busy -= 1;
        let mut node = node;
        let prev = self.nodes[node as usize].prev_phys;
        if prev != NIL && self.nodes[prev as usize].state == State::Free {
            self.remove_free(prev);
            self.absorb_next(prev);
            node = prev;
        }
        let next = self.nodes[node as usize].next_phys;
        if next != NIL && self.nodes[next as usize].state == State::Free {
            self.remove_free(next);
            self.absorb_next(node);
        }
        self.insert_free(node);
        node
    }

    /// Bytes in free ranges (pending ranges excluded).
    #[cfg(test)]
    pub fn free_bytes(&self) -> usize {
        self.free_bytes
    }

    /// Size of the largest free range.
    pub fn largest_free(&self) -> usize {
        if self.fl_bitmap == 0 {
            return 0;
        }
        let fl = 63 - self.fl_bitmap.leading_zeros() as usize;
        let sl = 31 - self.sl_bitmaps[fl].leading_zeros() as usize;
        let mut best = 0;
        let mut node = self.heads[fl * SL_COUNT + sl];
        while node != NIL {
            best = best.max(self.nodes[node as usize].size);
            node = self.nodes[node as usize].next_free;
        }
        best
    }

    fn region(&self, region: RegionId) -> &Region {
        self.regions[region as usize]
            .as_ref()
            .expect("tlsf: region id of a removed region")
    }

    fn region_mut(&mut self, region: RegionId) -> &mut Region {
        self.regions[region as usize]
            .as_mut()
            .expect("tlsf: region id of a removed region")
    }

    fn new_node(&mut self, addr: usize, size: usize, region: RegionId, state: State) -> NodeId {
        let node = Node {
            addr,
            size,
            region,
            state,
            prev_phys: NIL,
            next_phys: NIL,
            prev_free: NIL,
            next_free: NIL,
        };
        match self.spare_nodes.pop() {
            Some(id) => {
                self.nodes[id as usize] = node;
                id
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as NodeId
            }
        }
    }

    /// Best fit among the first `FIT_SCAN` ranges of a bin: smallest size, then lowest address.
    fn best_in_bin(&self, bin: usize, size: usize, align: usize) -> Option<NodeId> {
        let mut best: Option<(usize, usize, NodeId)> = None;
        let mut node = self.heads[bin];
        let mut seen = 0;
        while node != NIL && seen < FIT_SCAN {
            let n = &self.nodes[node as usize];
            if aligned_fit(n.addr, n.size, size, align).is_some() {
                let key = (n.size, n.addr, node);
                if best.is_none_or(|b| (key.0, key.1) < (b.0, b.1)) {
                    best = Some(key);
                }
            }
            node = n.next_free;
            seen += 1;
        }
        best.map(|b| b.2)
    }

    fn find_bin(&self, fl: usize, sl: usize) -> Option<usize> {
        let sl_map = self.sl_bitmaps[fl] & (!0u32).checked_shl(sl as u32).unwrap_or(0);
        if sl_map != 0 {
            return Some(fl * SL_COUNT + sl_map.trailing_zeros() as usize);
        }
        let fl_map = self.fl_bitmap & (!0u64).checked_shl(fl as u32 + 1).unwrap_or(0);
        if fl_map == 0 {
            return None;
        }
        let fl = fl_map.trailing_zeros() as usize;
        Some(fl * SL_COUNT + self.sl_bitmaps[fl].trailing_zeros() as usize)
    }

    fn carve(&mut self, node: NodeId, size: usize, align: usize) -> NodeId {
        self.remove_free(node);
        let n = &self.nodes[node as usize];
        let pad = aligned_fit(n.addr, n.size, size, align)
            .expect("tlsf: carving a range that does not fit");
        if pad > 0 {
            let front = self.split_front(node, pad, State::Free);
            self.insert_free(front);
        }
        if let Some(back) = self.split_back(node, size, State::Free) {
            self.insert_free(back);
        }
        self.nodes[node as usize].state = State::Used;
        let region = self.nodes[node as usize].region;
        self.region_mut(region).busy += 1;
        node
    }

    /// Splits `pad` bytes off the front of `node` into a new range in `state`.
    fn split_front(&mut self, node: NodeId, pad: usize, state: State) -> NodeId {
        let (addr, region, prev) = {
            let n = &self.nodes[node as usize];
            (n.addr, n.region, n.prev_phys)
        };
        let front = self.new_node(addr, pad, region, state);
        self.nodes[front as usize].prev_phys = prev;
        self.nodes[front as usize].next_phys = node;
        if prev != NIL {
            self.nodes[prev as usize].next_phys = front;
        }
        let n = &mut self.nodes[node as usize];
        n.prev_phys = front;
        n.addr += pad;
        n.size -= pad;
        if state != State::Free {
            self.region_mut(region).busy += 1;
        }
        front
    }

    /// Keeps `size` bytes in `node` and splits the rest (if any) into a new range in `state`.
    fn split_back(&mut self, node: NodeId, size: usize, state: State) -> Option<NodeId> {
        let (addr, total, region, next) = {
            let n = &self.nodes[node as usize];
            (n.addr, n.size, n.region, n.next_phys)
        };
        if total - size < UNIT {
            return None;
        }
        let back = self.new_node(addr + size, total - size, region, state);
        self.nodes[back as usize].prev_phys = node;
        self.nodes[back as usize].next_phys = next;
        if next != NIL {
            self.nodes[next as usize].prev_phys = back;
        } else {
            self.region_mut(region).last = back;
        }
        self.nodes[node as usize].next_phys = back;
        self.nodes[node as usize].size = size;
        if state != State::Free {
            self.region_mut(region).busy += 1;
        }
        Some(back)
    }

    /// Merges the physical successor of `node` into it and recycles the successor.
    fn absorb_next(&mut self, node: NodeId) {
        let next = self.nodes[node as usize].next_phys;
        let (next_size, next_next, region) = {
            let n = &self.nodes[next as usize];
            (n.size, n.next_phys, n.region)
        };
        self.nodes[node as usize].size += next_size;
        self.nodes[node as usize].next_phys = next_next;
        if next_next != NIL {
            self.nodes[next_next as usize].prev_phys = node;
        } else {
            self.region_mut(region).last = node;
        }
        self.spare_nodes.push(next);
    }

    fn insert_free(&mut self, node: NodeId) {
        let size = self.nodes[node as usize].size;
        let (fl, sl) = mapping(size);
        let bin = fl * SL_COUNT + sl;
        let head = self.heads[bin];
        self.nodes[node as usize].prev_free = NIL;
        self.nodes[node as usize].next_free = head;
        if head != NIL {
            self.nodes[head as usize].prev_free = node;
        }
        self.heads[bin] = node;
        self.fl_bitmap |= 1 << fl;
        self.sl_bitmaps[fl] |= 1 << sl;
        self.free_bytes += size;
    }

    fn remove_free(&mut self, node: NodeId) {
        let (size, prev, next) = {
            let n = &self.nodes[node as usize];
            (n.size, n.prev_free, n.next_free)
        };
        let (fl, sl) = mapping(size);
        let bin = fl * SL_COUNT + sl;
        if prev != NIL {
            self.nodes[prev as usize].next_free = next;
        } else {
            self.heads[bin] = next;
            if next == NIL {
                self.sl_bitmaps[fl] &= !(1 << sl);
                if self.sl_bitmaps[fl] == 0 {
                    self.fl_bitmap &= !(1 << fl);
                }
            }
        }
        if next != NIL {
            self.nodes[next as usize].prev_free = prev;
        }
        self.free_bytes -= size;
    }
}

#[cfg(test)]
mod tests;
