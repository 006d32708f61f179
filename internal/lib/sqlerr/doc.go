// Package sqlerr tells a statement the database refused from one whose
// outcome is unknown (Refused): the plugin keeps a COMMIT of unknown
// outcome pending, and the sharding router undoes the lookup pairs of a
// refused insert.
package sqlerr
