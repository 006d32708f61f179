// Package faults lets tests make a step of the product fail where no real
// fault can be placed (a process dying between the two phases of a
// commit over several shards). The product asks At(step) at each such
// step; without a test's Set it is one atomic load and returns nil.
package faults
