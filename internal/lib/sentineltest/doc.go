// Package sentineltest checks a package's Is helpers of sentinel errors,
// for its tests: each sees its sentinel through wrapping and rejects
// every other error, and every sentinel the package declares has one.
package sentineltest
