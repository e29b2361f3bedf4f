use super::*;

impl Tlsf {
    /// Checks every structural invariant; used by tests.
    pub(crate) fn check(&self) {
        let mut free_total = 0;
        for (rid, region) in self.regions.iter().enumerate() {
            let Some(region) = region else { continue };
            let mut node = region.last;
            let mut end = region.addr + region.size;
            let mut busy = 0;
            let mut prev_free = false;
            while node != NIL {
                let n = &self.nodes[node as usize];
                assert_eq!(n.region as usize, rid);
                assert_eq!(n.addr + n.size, end, "ranges tile the region");
                assert!(n.size % UNIT == 0 && n.size > 0);
                let free = n.state == State::Free;
                assert!(!(free && prev_free), "two free neighbours were not merged");
                prev_free = free;
                if free {
                    free_total += n.size;
                    let (fl, sl) = mapping(n.size);
                    assert!(self.sl_bitmaps[fl] & (1 << sl) != 0);
                } else {
                    busy += 1;
                }
                end = n.addr;
                node = n.prev_phys;
            }
            assert_eq!(end, region.addr);
            assert_eq!(busy, region.busy);
        }
        assert_eq!(free_total, self.free_bytes);
    }
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn mapping_bins_are_ordered_and_search_rounds_up() {
    let mut rng = Rng(0x1234_5678_9abc_def1);
    for _ in 0..5000 {
        let size = ((rng.next() >> (rng.next() % 40 + 10)) as usize + 1) * UNIT;
        let (fl, sl) = mapping(size);
        assert!(fl < FL_COUNT && sl < SL_COUNT);
        let bigger = size + UNIT * (1 + (rng.next() % 1000) as usize);
        assert!(mapping(bigger) >= (fl, sl));
        let (sfl, ssl) = mapping_search(size).unwrap();
        assert!((sfl, ssl) >= (fl, sl));
        // Every size mapped into the search bin is at least `size`.
        let lo = if sfl == 0 {
            ssl * UNIT
        } else {
            let log = sfl as u32 + SMALL_LOG - 1;
            (1 << log) + (ssl << (log - SL_LOG))
        };
        assert!(lo >= size, "bin floor {lo} below request {size}");
    }
}

#[test]
fn random_alloc_free_never_overlaps_and_merges_back() {
    let mut rng = Rng(0xdead_beef_cafe_f00d);
    let mut tlsf = Tlsf::new();
    let regions: Vec<_> = (0..3)
        .map(|i| tlsf.add_region((i + 1) << 30, 64 << 20))
        .collect();
    let mut live: Vec<(NodeId, usize, usize)> = Vec::new();
    for step in 0..20_000 {
        if live.is_empty() || rng.next() % 100 < 55 {
            let size =
                ((rng.next() % (1 << (rng.next() % 20 + 1))) as usize + 1).div_ceil(UNIT) * UNIT;
            let align = UNIT << (rng.next() % 6);
            if let Some(node) = tlsf.alloc(size, align) {
                let (addr, got, _) = tlsf.node(node);
                assert_eq!(addr % align, 0);
                assert!(got >= size && got < size + UNIT);
                live.push((node, addr, got));
            }
        } else {
            let idx = (rng.next() as usize) % live.len();
            let (node, _, _) = live.swap_remove(idx);
            tlsf.free(node);
        }
        if step % 997 == 0 {
            tlsf.check();
            let mut spans: Vec<_> = live.iter().map(|l| (l.1, l.1 + l.2)).collect();
            spans.sort();
            for pair in spans.windows(2) {
                assert!(pair[0].1 <= pair[1].0, "overlap {pair:?}");
            }
        }
    }
    for (node, _, _) in live.drain(..) {
        tlsf.free(node);
    }
    tlsf.check();
    for region in regions {
        assert!(tlsf.region_is_empty(region));
        tlsf.remove_region(region);
    }
    assert_eq!(tlsf.free_bytes(), 0);
}

#[test]
fn growth_pending_and_largest_free() {
    let mut tlsf = Tlsf::new();
    let region = tlsf.add_region(1 << 40, 1 << 20);
    let a = tlsf.alloc(700 * UNIT, UNIT).unwrap();
    assert_eq!(
        tlsf.region_tail(region),
        ((1 << 40) + 700 * UNIT, (1 << 20) - 700 * UNIT)
    );
    assert!(tlsf.alloc(4 << 20, UNIT).is_none());
    tlsf.grow_region(region, 5 << 20);
    let b = tlsf.alloc(4 << 20, 4096).unwrap();
    tlsf.check();
    // Pending ranges are neither reused by `alloc` nor merged.
    tlsf.mark_pending(a);
    // `b` starts at the next 4096 boundary after `a`; the tail behind it is the largest.
    let b_start = (700 * UNIT).div_ceil(4096) * 4096;
    assert_eq!(tlsf.largest_free(), (5 << 20) - b_start - (4 << 20));
    let (used, rest) = tlsf.take_pending(a, 300 * UNIT, 2048).unwrap();
    assert_eq!(tlsf.node(used).0 % 2048, 0);
    tlsf.check();
    for node in rest.into_iter().flatten() {
        tlsf.free(node);
    }
    tlsf.free(used);
    tlsf.free(b);
    tlsf.check();
    assert!(tlsf.region_is_empty(region));
    assert_eq!(tlsf.largest_free(), 5 << 20);
    tlsf.grow_region(region, 6 << 20);
    assert_eq!(tlsf.region_span(region), (1 << 40, 6 << 20));
    tlsf.remove_region(region);
}
