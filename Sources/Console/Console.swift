// Console: the readline REPL, the batch language and runner, and output
// (text, JSON, recap). Above Workbench; the beaconbench executable calls it.
//
// Filled by the issue "Console".
