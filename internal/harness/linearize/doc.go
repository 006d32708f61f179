// Package linearize checks a history of operations, each with its call and
// return times, for linearizability against a sequential model: whether
// some order of the operations, each placed between its call and its
// return, is a run of the model that gives every operation its recorded
// output. It is the Wing & Gong search with Lowe's cache of (operations
// linearized, state) pairs already explored, the algorithm of
// github.com/anishathalye/porcupine, for one partition at a time: the
// caller partitions (per key, per read) and checks each.
package linearize
