import Foundation
import Inventory

/// `beaconbench-bench inventory-writer PATH`: begins a run and records step
/// outcomes one committed transaction at a time, printing `committed N`
/// after each commit, until killed. The crash-safety test kills it with
/// SIGKILL at random moments and checks what the file holds.
func inventoryWriter(path: String) async throws -> Never {
    let inventory = try Inventory(path: path)
    let run = try await inventory.beginRun(.init(command: "inventory-writer", operatorName: "crash-test"))
    print("run \(run)")
    fflush(nil)
    var committed = 0
    while true {
        let step = try await inventory.beginStep(run: run, device: nil, step: "step \(committed)")
        try await inventory.finishStep(step, .ok, detail: String(repeating: "x", count: committed % 500))
        committed += 1
        print("committed \(committed)")
        fflush(nil)
    }
}
