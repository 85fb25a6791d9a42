import Foundation

/// The state file (`--state`): the fleet's ground truth saved soon after a
/// change, and at exit.
extension SimulatedBluetoothd {
    /// Saves the state file soon (changes within 200 ms are saved together).
    func markChanged() {
        guard options.statePath != nil, !saveScheduled else { return }
        saveScheduled = true
        Task { [self] in
            try? await Task.sleep(for: .milliseconds(200))
            saveNow()
        }
    }

    /// Writes the state file now, if there is one.
    public func saveNow() {
        saveScheduled = false
        guard let path = options.statePath else { return }
        do {
            try StateFile.save(fleet(), to: path)
        } catch {
            FileHandle.standardError.write(Data("beaconbench-sim: cannot save the state: \(error)\n".utf8))
        }
    }
}
