// Package clauses holds the changes the sharding plugin and its merge make
// to a GORM statement's clauses.
package clauses
