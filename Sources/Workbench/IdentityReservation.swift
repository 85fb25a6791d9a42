import BlueZClient
import Inventory
import SBeaconProtocol

/// Reserves the identities a fleet run writes: in the inventory under its
/// write lock, and first on the shared server when the bench has one and
/// it answers. Once the server fails, it is not asked again in the run
/// (one note says so), and identities are allocated by this bench alone.
actor IdentityReserver {
    let client: BluetoothClient
    let inventory: Inventory
    let run: Int64
    let dryRun: Bool
    /// The shared server's identity registry, when the bench has one.
    let sharedIdentities: (any SharedIdentities)?
    let progress: @Sendable (FleetProgress) -> Void
    /// Why the shared server is not asked any more in this run.
    private var sharedUnreachable: String?

    init(
        client: BluetoothClient, inventory: Inventory, run: Int64, dryRun: Bool,
        sharedIdentities: (any SharedIdentities)?, progress: @escaping @Sendable (FleetProgress) -> Void
    ) {
        self.client = client
        self.inventory = inventory
        self.run = run
        self.dryRun = dryRun
        self.sharedIdentities = sharedIdentities
        self.progress = progress
    }

    /// The identity meant for a device, reserved in the inventory under
    /// its write lock — and first claimed on the shared server, when the
    /// bench has one and it answers — before anything is written.
    nonisolated func reserve(
        _ plan: IdentityPlan, for address: String, holds current: BeaconIdentity, record: InventoryRecorder
    ) async throws -> IdentityReservation {
        let advertised = await advertisedIdentities()
        guard !dryRun, let shared = sharedIdentities else {
            return try await record {
                try await inventory.reserveIdentity(
                    device: address, plan: plan, holds: current, advertised: advertised, run: run, commit: !dryRun)
            }
        }
        // What this inventory would give: the minor offered to the server.
        var proposed: UInt16?
        var reservation = try await record {
            try await inventory.reserveIdentity(
                device: address, plan: plan, holds: current, advertised: advertised, run: run, commit: false)
        }
        var serverNote: String?
        // The server's answer wins when it is free here; a minor another
        // process took here meanwhile is offered back to the server.
        for _ in 0..<4 {
            if let reason = await sharedUnreachableReason() {
                serverNote = "the server was unreachable (\(reason)): allocated by this bench alone"
                proposed = nil
                break
            }
            do {
                let floor = try await record { try await inventory.highestMinor(major: plan.major) }
                proposed = try await shared.claim(
                    address: address.uppercased(), major: plan.major, preferred: reservation.identity.minor,
                    floor: floor)
            } catch {
                await sharedFailed("\(error)")
                continue
            }
            reservation = try await record {
                try await inventory.reserveIdentity(
                    device: address, plan: plan, holds: current, advertised: advertised, proposed: proposed, run: run)
            }
            if reservation.identity.minor == proposed { return reservation }
        }
        reservation = try await record {
            try await inventory.reserveIdentity(
                device: address, plan: plan, holds: current, advertised: advertised, run: run)
        }
        if let serverNote {
            reservation.note = [reservation.note, serverNote].compactMap { $0 }.joined(separator: "; ")
        }
        return reservation
    }

    private func sharedUnreachableReason() -> String? { sharedUnreachable }
    private func sharedFailed(_ reason: String) {
        if sharedUnreachable == nil {
            sharedUnreachable = reason
            progress(
                .note(
                    address: "",
                    "the shared server is unreachable (\(reason)): identities are allocated by this bench alone in this run; the fleet audit reports any duplicate"
                ))
        }
    }

    /// The identities the SBeacons in range advertise, by address.
    private nonisolated func advertisedIdentities() async -> [String: BeaconIdentity] {
        var result: [String: BeaconIdentity] = [:]
        for (address, bytes) in await client.advertisedData(company: SBeaconUUID.appleCompanyID) {
            guard let advert = try? IBeaconAdvert(bytes: bytes) else { continue }
            result[address] = advert.identity
        }
        return result
    }
}
