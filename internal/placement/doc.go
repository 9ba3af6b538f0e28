// Package placement is Sextant's scheduler: it owns nodes and placements in
// memory and decides where a workload goes, with kube-scheduler's default
// profile as the reference semantics. Inputs are Kubernetes objects (core/v1
// Node and Pod), decoded strictly by DecodeNodes and DecodePods.
//
// It does not own durability or HTTP: a Txn returns the records (kinds
// "nodes" and "placements") its changes produce. In the server the
// scheduler is the catalog table of both kinds (Tables, table.go): the
// write engine's follower is the only path by which stored records become its
// state (Load at start, Apply after each commit, whoever wrote them), and
// requests are registry writes (PlaceWrite, NodesWrite, DeleteNodeWrite,
// DeletePlacementWrite, write.go) that decide a whole commit batch in one
// Txn, hand the registry its store ops, and abort the Txn once the store
// has committed. Used alone, the caller makes a Txn's ops durable and then
// commits it (Scheduler.Place).
//
// # Decisions
//
// Filters run in kube-scheduler's order (NodeAffinity's name pre-filter,
// NodeUnschedulable, NodeName, TaintToleration, NodeAffinity,
// NodeResourcesFit, PodTopologySpread, InterPodAffinity) over the set of
// nodes still feasible, as bitsets: most are answered from indexes (the
// label Postings over node labels, the node set of each taint, the
// unschedulable set), the rest by a tight loop over per-node arrays; a node
// leaves the set at the first filter that rejects it and is counted under
// that filter's reasons. Every feasible node is then scored by
// NodeResourcesFit (LeastAllocated), BalancedAllocation, TaintToleration,
// NodeAffinity, PodTopologySpread and InterPodAffinity, normalised and
// weighted as the default profile does (3, 2, 2, 2, 1, 1). The highest
// total wins; among equal totals the node created first (lowest Seq) wins,
// so a decision is a pure function of the records and the request.
//
// Counts that spreading and inter-pod terms need (matching pods per node,
// existing pods' terms per node) are kept incrementally by every placement
// and removal; no decision scans the placed workloads.
//
// # Concurrency
//
// One writer at a time: Begin takes the writer lock, so decisions and
// their commit are serialized and two clients can never reserve the same
// free capacity. A Txn changes the decision state in place with an undo
// log (Abort rolls back). Readers (Node, Nodes, Placement, Placements)
// read a separate view that only Commit changes, under a read-write lock
// held for O(records changed): readers never wait for a decision or for a
// durable write, and never see a change before it is committed.
//
// With Config.Workers > 1 the Scheduler owns a fixed pool of goroutines
// that split one decision's per-node loops on large clusters (the writer
// runs one chunk itself and waits for the rest); Close stops them.
package placement
