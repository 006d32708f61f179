// Package engines is where the optional parts of freshread register
// themselves, as database/sql drivers do, so that a service links them only
// when it imports the public package that brings them
// (github.com/freshread/freshread/mysqlfamily for MySQL and MariaDB). It is
// internal: the registration API is not part of the public surface.
//
// A part that is not registered is refused where it is needed with
// NotLinkedError, which names the import that links it; it is never
// replaced by a silent approximation.
package engines
