//! Tuned constants of grouped aggregation ([`crate::group_agg`], [`crate::group_table`])
//! and of the semi-join membership test ([`crate::member`]).
//!
//! Each constant says what it controls, the value, and the measurement that chose it;
//! [`crate::group_agg::GroupAggOptions`]'s `Default` reads its defaults from here.

super::switches! {}

/// Invocations per workgroup of the grouped-aggregation kernels (64, 128 or 256 are
/// accepted): 256, the size `bench aggregate` measured (the dense tables 6-24x faster
/// than DataFusion's hash aggregation up to 1000 groups;
/// docs/benchmarks/history/round-1.md, "GROUP BY aggregation").
pub const GROUP_AGG_WORKGROUP: u32 = 256;

/// Rows per workgroup tile of the dense strategy: 16,384 (the same measurement).
pub const GROUP_AGG_TILE_ROWS: u32 = 16384;

/// Most groups the dense strategy takes on any device, whatever its workgroup memory
/// (24 bytes a group): 1024, which 32 KiB of workgroup memory holds.
pub const DENSE_MAX_GROUPS: u32 = 1024;

/// [`crate::group_agg::GroupAggStrategy::Auto`] picks dense tags when the average group
/// has at least `workgroup_size / DENSE_MIN_AVG_DIVISOR` rows: 8 (regions at least an
/// eighth of the workgroup: tags in workgroup memory then amortise the per-tile merge
/// of G entries).
pub const DENSE_MIN_AVG_DIVISOR: u32 = 8;

/// Groups up to which dense tags may fold each invocation's rows in registers first
/// (`dense_small` in shaders/group_agg/dense.wgsl; its `SMALL_G`): 8. Used only with
/// `GroupAggOptions::small_groups`, off by default: on the H100 the register fold
/// alone (in 16,384-row tiles) did not speed up TPC-H Q1
/// (docs/benchmarks/history/session-26.md).
pub const SMALL_GROUPS: u32 = 8;

/// Rows per tile of `dense_small` (at most; a multiple of every workgroup size): 2048.
/// Not measured on the H100 yet (see [`SMALL_GROUPS`]).
pub const SMALL_TILE_ROWS: u32 = 2048;

/// Rows per piece of the sparse strategy's two-level segmented reduction (a region
/// longer than this is reduced by several invocations): 1024.
pub const SPARSE_PIECE_ROWS: u64 = 1024;

/// Invocations per workgroup of the group-table kernels (shaders/group_table*.wgsl):
/// 256.
pub const GROUP_TABLE_WORKGROUP: u32 = 256;

/// Invocations per workgroup of the membership kernel (shaders/member.wgsl): 256.
pub const MEMBER_WORKGROUP: u32 = 256;
