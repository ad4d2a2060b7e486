//! The binary's allocator: mimalloc, asked the way its fast path expects.
//!
//! The `mimalloc` crate's `GlobalAlloc` sends every allocation through `mi_malloc_aligned`,
//! because Rust passes an alignment with each. In mimalloc 3 that call takes its quick path
//! only while the size's page has a free block ready; otherwise it falls to an over-allocating
//! path (a bigger block, aligned inside, its page marked as holding interior pointers), even
//! for an alignment of 1. A server that frees and allocates the same sizes on every request
//! hits that path all the time: `enforce serve` did about 17 times per chat request
//! (docs/performance.md). Plain `mi_malloc` has no such detour, and its
//! blocks are aligned enough: every block size is a multiple of 8 (of 16 from 16 bytes up)
//! and a page's first block is 16-aligned, so a block for a size that is a multiple of an
//! alignment up to 16 has that alignment. Only larger or odd alignments go the aligned way.

use libmimalloc_sys::{
    mi_free, mi_malloc, mi_malloc_aligned, mi_realloc, mi_realloc_aligned, mi_zalloc,
    mi_zalloc_aligned,
};
use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

/// mimalloc as the global allocator (see the module's documentation).
pub struct MiMalloc;

/// The largest alignment every plain mimalloc block has, for a size that is a multiple of it
/// (mimalloc's `MI_MAX_ALIGN_SIZE`).
const PLAIN_ALIGN: usize = 16;

/// Whether a plain block of `size` bytes is aligned to `align`.
fn plain(size: usize, align: usize) -> bool {
    align <= PLAIN_ALIGN && size % align == 0
}

// SAFETY: every pointer handed out comes from mimalloc and is freed or resized by mimalloc;
// `plain` sends a layout to the unaligned calls only where their blocks meet its alignment.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for MiMalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: mimalloc's allocation functions take any size and alignment.
        unsafe {
            if plain(layout.size(), layout.align()) {
                mi_malloc(layout.size()).cast()
            } else {
                mi_malloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as in `alloc`.
        unsafe {
            if plain(layout.size(), layout.align()) {
                mi_zalloc(layout.size()).cast()
            } else {
                mi_zalloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: `ptr` came from this allocator, so from mimalloc, aligned or not.
        unsafe { mi_free(ptr.cast::<c_void>()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from mimalloc; either call keeps the contents up to the smaller
        // size and returns a block aligned as asked.
        unsafe {
            if plain(new_size, layout.align()) {
                mi_realloc(ptr.cast::<c_void>(), new_size).cast()
            } else {
                mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align()).cast()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every layout gets a block with its alignment, zeroed when asked, that keeps its bytes
    /// through growing and shrinking, plain or aligned, small sizes to large.
    #[test]
    fn blocks_have_the_alignment_asked_for_and_keep_their_bytes() {
        let allocator = MiMalloc;
        let sizes = [
            1,
            7,
            8,
            12,
            16,
            24,
            40,
            48,
            96,
            192,
            200,
            384,
            640,
            1000,
            1500,
            4096,
            12_288,
            70_000,
            3 << 20,
        ];
        for align in [1, 2, 4, 8, 16, 32, 64, 128, 4096] {
            for &size in &sizes {
                let Ok(layout) = Layout::from_size_align(size, align) else {
                    continue;
                };
                // Many at once, so that pages fill and the allocator takes every path.
                let rounds = if size > 4096 { 4 } else { 64 };
                let mut blocks = Vec::new();
                for round in 0..rounds {
                    // SAFETY: a non-zero size; each block is freed below with its layout.
                    let ptr = unsafe {
                        if round % 2 == 0 {
                            allocator.alloc(layout)
                        } else {
                            allocator.alloc_zeroed(layout)
                        }
                    };
                    assert!(!ptr.is_null(), "size {size}, align {align}");
                    assert_eq!(ptr as usize % align, 0, "size {size}, align {align}");
                    // SAFETY: the block holds `size` bytes.
                    let bytes = unsafe { std::slice::from_raw_parts_mut(ptr, size) };
                    if round % 2 == 1 {
                        assert!(bytes.iter().all(|&b| b == 0), "zeroed: size {size}");
                    }
                    bytes.fill(round);
                    blocks.push((ptr, round));
                }
                for (ptr, round) in blocks {
                    let grown = size * 3 + 5;
                    // SAFETY: `ptr` is a live block of `layout`; the new size is not zero.
                    let ptr = unsafe { allocator.realloc(ptr, layout, grown) };
                    assert!(!ptr.is_null());
                    assert_eq!(ptr as usize % align, 0, "grown: size {size}, align {align}");
                    // SAFETY: the first `size` bytes were kept.
                    let kept = unsafe { std::slice::from_raw_parts(ptr, size) };
                    assert!(kept.iter().all(|&b| b == round), "grown: size {size}");
                    let grown_layout = Layout::from_size_align(grown, align).expect("a layout");
                    let shrunk = size.div_ceil(2);
                    // SAFETY: a live block of `grown_layout`; the new size is not zero.
                    let ptr = unsafe { allocator.realloc(ptr, grown_layout, shrunk) };
                    assert_eq!(
                        ptr as usize % align,
                        0,
                        "shrunk: size {size}, align {align}"
                    );
                    // SAFETY: the first `shrunk` bytes were kept.
                    let kept = unsafe { std::slice::from_raw_parts(ptr, shrunk) };
                    assert!(kept.iter().all(|&b| b == round), "shrunk: size {size}");
                    let shrunk_layout = Layout::from_size_align(shrunk, align).expect("a layout");
                    // SAFETY: a live block of `shrunk_layout`, freed once.
                    unsafe { allocator.dealloc(ptr, shrunk_layout) };
                }
            }
        }
    }
}
