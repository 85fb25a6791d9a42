import FoundationEssentials
import SafeText

#if canImport(Glibc)
    import Glibc
#endif

/// A per-device proof file (`beaconbench ledger prove DEVICE --out FILE`):
/// one JSON file holding a signed checkpoint and the device's entries with
/// their RFC 9162 inclusion proofs against it, checked without the
/// inventory (docs/ledger.md, "Proof files" and "Checking a proof file").
public enum ProofFile {
    public static let format = "beaconbench-ledger-proof/1"

    /// Bounds a checker applies (docs/ledger.md lists them).
    public static let maxFile = 64 * 1024 * 1024
    public static let maxEntries = 1_000_000
    public static let maxEntry = 1024 * 1024
    public static let maxProof = 64
    public static let maxDevice = 256

    /// The file's bytes, exactly as docs/ledger.md lays them out.
    ///
    /// - Parameters:
    ///   - device: the device's address, as entries about it name it.
    ///   - at: the time the proof is as of (`2026-12-03T11:44:24.598Z`), or nil.
    ///   - checkpointNote: a signed checkpoint (`SignedCheckpoint.sign`).
    ///   - entries: the device's entries in index order: each one's index,
    ///     bytes and inclusion proof against the checkpoint's tree size.
    public static func make(
        device: String, at: String?, checkpointNote: String, entries: [(index: Int, bytes: [UInt8], proof: [Digest])]
    ) throws(LedgerError) -> [UInt8] {
        guard !device.isEmpty, device.utf8.count <= maxDevice else {
            throw LedgerError("the device address is empty or longer than \(maxDevice) bytes")
        }
        if let at, !isTime(at) {
            throw LedgerError("the time \(LedgerError.quoted(at)) is not YYYY-MM-DDTHH:MM:SS.mmmZ")
        }
        guard !entries.isEmpty else { throw LedgerError("a proof file needs at least one entry") }
        guard entries.count <= maxEntries else { throw LedgerError("more than \(maxEntries) entries") }
        var out: [UInt8] = []
        func line(_ name: String, _ value: CanonicalJSON.Value) {
            CanonicalJSON.writeString(name, to: &out)
            out.append(UInt8(ascii: ":"))
            CanonicalJSON.write(value, to: &out)
            out.append(contentsOf: Array(",\n".utf8))
        }
        out.append(UInt8(ascii: "{"))
        line("format", .text(format))
        line("device", .text(device))
        line("at", at.map { .text($0) } ?? .null)
        line("checkpoint", .text(checkpointNote))
        out.append(contentsOf: Array("\"entries\":[\n".utf8))
        var previous = -1
        for (number, entry) in entries.enumerated() {
            guard entry.index > previous else {
                throw LedgerError("entry \(number + 1)'s index \(entry.index) is not greater than the one before it")
            }
            previous = entry.index
            guard let text = String(validating: entry.bytes, as: UTF8.self), entry.bytes.count <= maxEntry else {
                throw LedgerError("entry \(entry.index) is not UTF-8 of at most \(maxEntry) bytes")
            }
            guard entry.proof.count <= maxProof else {
                throw LedgerError("entry \(entry.index)'s proof has more than \(maxProof) hashes")
            }
            CanonicalJSON.write(
                .object([
                    ("index", .integer(Int64(entry.index))), ("entry", .text(text)),
                    ("proof", .array(entry.proof.map { .text($0.hex) })),
                ]), to: &out)
            out.append(contentsOf: Array((number + 1 < entries.count ? ",\n" : "\n").utf8))
        }
        out.append(contentsOf: Array("]}\n".utf8))
        return out
    }

    /// The bytes of the file at `path`, at most `maxFile` of them: a larger
    /// file, or one that is not a regular file (a FIFO, a device, a
    /// directory), is refused without reading it (`BoundedFile`).
    public static func read(path: String) throws(LedgerError) -> [UInt8] {
        do { return try BoundedFile.read(path, limit: maxFile) } catch {
            throw LedgerError("could not read \(LedgerError.quoted(path)): \(error)")
        }
    }

    /// Checks a proof file as docs/ledger.md's "Checking a proof file"
    /// says, in that order; the first thing that fails is thrown.
    public static func check(
        _ fileBytes: [UInt8], allowedSigners: String, sshKeygen: String = SignedCheckpoint.defaultSSHKeygen,
        timeout: Duration = .seconds(30)
    ) throws -> ProofReport {
        try check(
            fileBytes, allowedSigners: try AllowedSigners.load(allowedSigners), sshKeygen: sshKeygen, timeout: timeout)
    }

    /// `check` with the allowed_signers file already read.
    public static func check(
        _ fileBytes: [UInt8], allowedSigners: AllowedSigners, sshKeygen: String = SignedCheckpoint.defaultSSHKeygen,
        timeout: Duration = .seconds(30)
    ) throws -> ProofReport {
        // 1. Size, UTF-8, JSON.
        guard fileBytes.count <= maxFile else {
            throw LedgerError("the file is \(fileBytes.count) bytes, more than \(maxFile)")
        }
        guard String(validating: fileBytes, as: UTF8.self) != nil else { throw LedgerError("the file is not UTF-8") }
        let document: CanonicalJSON.Value
        do { document = try StrictJSON.parse(fileBytes) } catch {
            throw LedgerError("the file is not JSON this format allows: \(error.message)")
        }
        guard case .object(let members) = document else { throw LedgerError("the file is not a JSON object") }
        let fields = Dictionary(members, uniquingKeysWith: { first, _ in first })
        // 2. The format id.
        guard case .text(let formatID) = fields["format"] else {
            throw LedgerError("the file has no format member (a string): it is not a ledger proof")
        }
        guard formatID == format else {
            throw LedgerError("the file's format is \(LedgerError.quoted(formatID)), not \(format)")
        }
        let expected = ["format", "device", "at", "checkpoint", "entries"]
        if let extra = members.first(where: { !expected.contains($0.0) }) {
            throw LedgerError("the file has a member \(LedgerError.quoted(extra.0)) the format does not define")
        }
        // 3. Device and time.
        guard case .text(let device) = fields["device"], !device.isEmpty, device.utf8.count <= maxDevice else {
            throw LedgerError("the file's device member is not a string of 1 to \(maxDevice) bytes")
        }
        let at: String?
        switch fields["at"] {
        case .null: at = nil
        case .text(let text) where isTime(text): at = text
        default: throw LedgerError("the file's at member is neither null nor a time YYYY-MM-DDTHH:MM:SS.mmmZ")
        }
        // 4. The signed checkpoint.
        guard case .text(let note) = fields["checkpoint"] else {
            throw LedgerError("the file's checkpoint member is not a string")
        }
        let (checkpoint, signer) = try SignedCheckpoint.verify(
            note: note, allowedSigners: allowedSigners, sshKeygen: sshKeygen, timeout: timeout)
        // 5. The entries.
        guard case .array(let items) = fields["entries"] else {
            throw LedgerError("the file's entries member is not an array")
        }
        guard !items.isEmpty, items.count <= maxEntries else {
            throw LedgerError("the file holds \(items.count) entries, not 1 to \(maxEntries)")
        }
        var report: [ProofReport.Entry] = []
        var previous = -1
        for (number, item) in items.enumerated() {
            let entry = try checkEntry(
                item, number: number + 1, previous: previous, device: device, at: at, checkpoint: checkpoint)
            previous = entry.index
            report.append(entry)
        }
        return ProofReport(device: device, at: at, checkpoint: checkpoint, signer: signer, entries: report)
    }

    private static func checkEntry(
        _ item: CanonicalJSON.Value, number: Int, previous: Int, device: String, at: String?, checkpoint: Checkpoint
    ) throws -> ProofReport.Entry {
        let which = "entry \(number) of the file"
        guard case .object(let members) = item, members.map(\.0) == ["index", "entry", "proof"] else {
            throw LedgerError("\(which) is not an object with exactly index, entry and proof, in that order")
        }
        guard case .integer(let index64) = members[0].1, index64 >= 0, let index = Int(exactly: index64) else {
            throw LedgerError("\(which) has an index that is not an integer ≥ 0")
        }
        guard index > previous else {
            throw LedgerError("\(which) has index \(index), not greater than the one before it (\(previous))")
        }
        guard index < checkpoint.size else {
            throw LedgerError("\(which) has index \(index), not below the checkpoint's tree size \(checkpoint.size)")
        }
        let which2 = "entry \(index)"
        guard case .text(let text) = members[1].1, text.utf8.count <= maxEntry else {
            throw LedgerError("\(which2): entry is not a string of at most \(maxEntry) bytes")
        }
        guard case .array(let hashes) = members[2].1, hashes.count <= maxProof else {
            throw LedgerError("\(which2): proof is not an array of at most \(maxProof) hashes")
        }
        var proof: [Digest] = []
        for hash in hashes {
            guard case .text(let hex) = hash, hex.utf8.allSatisfy({ isLowerHex($0) }), let digest = Digest(hex: hex)
            else { throw LedgerError("\(which2): a proof hash is not 64 lowercase hex digits") }
            proof.append(digest)
        }
        let bytes = Array(text.utf8)
        let value: CanonicalJSON.Value
        do { value = try StrictJSON.parse(bytes) } catch {
            throw LedgerError("\(which2) is not JSON an entry may be: \(error.message)")
        }
        guard CanonicalJSON.encode(value) == bytes else {
            throw LedgerError("\(which2) is not canonical JSON: written again it gives other bytes")
        }
        let names = ["v", "seq", "at", "event", "table", "op", "key", "row"]
        guard case .object(let fields) = value, fields.map(\.0) == names else {
            throw LedgerError(
                "\(which2) does not have exactly the members \(names.joined(separator: ", ")) in that order")
        }
        guard fields[0].1 == .integer(1) else { throw LedgerError("\(which2) has a version v other than 1") }
        guard fields[1].1 == .integer(Int64(index)) else {
            throw LedgerError("\(which2) has a seq that is not its index \(index)")
        }
        let entryAt: String?
        switch fields[2].1 {
        case .null: entryAt = nil
        case .text(let time) where isTime(time): entryAt = time
        default: throw LedgerError("\(which2) has an at that is neither null nor a time YYYY-MM-DDTHH:MM:SS.mmmZ")
        }
        guard case .text(let event) = fields[3].1, case .text(let table) = fields[4].1,
            case .text(let op) = fields[5].1,
            ["insert", "update", "delete", "note"].contains(op), case .array(let key) = fields[6].1,
            case .object(let row) = fields[7].1
        else {
            throw LedgerError(
                "\(which2) has an event, table, op, key or row of the wrong kind (strings; op insert, update, delete or note; an array; an object)"
            )
        }
        let keyed = (table == "devices" || table == "assignments") && key == [.text(device)]
        let named = row.contains { $0.0 == "device" && $0.1 == .text(device) }
        guard keyed || named else {
            throw LedgerError("\(which2) is not about the device \(LedgerError.quoted(device))")
        }
        if let at, let entryAt, entryAt > at {
            throw LedgerError("\(which2) was made at \(entryAt), after the file's time \(at)")
        }
        guard
            try MerkleTree.verifyInclusion(
                leafHash: MerkleTree.leafHash(bytes), index: index, size: checkpoint.size, proof: proof,
                root: checkpoint.root)
        else {
            throw LedgerError(
                "\(which2): its inclusion proof does not verify against the checkpoint's root at tree size \(checkpoint.size)"
            )
        }
        return ProofReport.Entry(
            index: index, at: entryAt, event: event, table: table, op: op,
            key: String(decoding: CanonicalJSON.encode(.array(key)), as: UTF8.self), bytes: bytes)
    }

    private static func isLowerHex(_ unit: UInt8) -> Bool {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(unit) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(unit)
    }

    /// Whether `text` is a time as entries write it: YYYY-MM-DDTHH:MM:SS.mmmZ.
    public static func isTime(_ text: String) -> Bool {
        let units = Array(text.utf8)
        let pattern = Array("0000-00-00T00:00:00.000Z".utf8)
        guard units.count == pattern.count else { return false }
        return zip(units, pattern).allSatisfy { unit, model in
            model == UInt8(ascii: "0") ? (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(unit) : unit == model
        }
    }
}

/// What a proof file showed: the signed checkpoint and the device's entries.
public struct ProofReport: Sendable, Equatable {
    public struct Entry: Sendable, Equatable {
        public let index: Int
        /// The entry's `at`, or nil when it has none.
        public let at: String?
        public let event: String
        public let table: String
        public let op: String
        /// The entry's key as canonical JSON (`["C0:1E:6D:EA:89:86"]`).
        public let key: String
        /// The entry's bytes.
        public let bytes: [UInt8]

        public init(index: Int, at: String?, event: String, table: String, op: String, key: String, bytes: [UInt8]) {
            self.index = index
            self.at = at
            self.event = event
            self.table = table
            self.op = op
            self.key = key
            self.bytes = bytes
        }
    }

    public let device: String
    public let at: String?
    public let checkpoint: Checkpoint
    /// The key name whose signature verified.
    public let signer: String
    public let entries: [Entry]

    public init(device: String, at: String?, checkpoint: Checkpoint, signer: String, entries: [Entry]) {
        self.device = device
        self.at = at
        self.checkpoint = checkpoint
        self.signer = signer
        self.entries = entries
    }
}
