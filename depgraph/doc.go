// Package depgraph learns a database's dependency graph: which tables a
// write to a table also writes (triggers and the functions they call,
// cascading foreign keys, rules) or changes the answer of (the views over
// it). AnalyzePostgres reads PostgreSQL's catalog and scans PL/pgSQL and
// SQL function bodies statement by statement with package classify;
// AnalyzeMySQL reads information_schema on MariaDB and MySQL.
//
// Both the freshness plugin (package plugin, in process) and the tracker
// daemon (package tracker, which publishes the graph to the store) use it;
// it imports neither.
package depgraph
