package main

// The demo runs MariaDB shards.
import _ "github.com/freshread/freshread/mysqlfamily"
