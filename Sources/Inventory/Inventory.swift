// Inventory: the SQLite record of every device, run and step outcome, over
// CSQLite with bound parameters only. Sits beside Workbench.
//
// Filled by the issue "Inventory and profiles".
