// Package registry is the set of databases the tracker watches, kept in
// Redis: an Entry names a database and its replicas (addresses, never
// credentials). The plugin announces its database (plugin.Config.Announce)
// and the tracker reads the set; both import this package, and neither
// imports the other.
package registry
