/// A checkpoint's note text, as C2SP tlog-checkpoint
/// (https://c2sp.org/tlog-checkpoint) defines it: the origin, the tree
/// size in decimal, the root hash in standard base64, then optional
/// extension lines, each line ending in a newline (docs/ledger.md,
/// "Checkpoints").
public struct Checkpoint: Sendable, Equatable {
    /// Who keeps the log: `beaconbench.local/bench/<bench id>` for a bench.
    public let origin: String
    /// The number of entries the tree holds.
    public let size: Int
    /// MTH of those entries.
    public let root: Digest
    /// Opaque lines after the root; none unless a caller adds them.
    public let extensions: [String]

    /// The longest origin, extension line and body accepted (bytes).
    public static let maxOrigin = 256
    public static let maxExtensionLine = 1024
    public static let maxExtensions = 16
    public static let maxBody = 8 * 1024

    /// A checkpoint, checked as `parse` checks one read back.
    public init(origin: String, size: Int, root: Digest, extensions: [String] = []) throws(LedgerError) {
        self.origin = origin
        self.size = size
        self.root = root
        self.extensions = extensions
        // The same rules a reader applies: what is written can be read.
        _ = try Checkpoint.parse(body)
    }

    private init(unchecked origin: String, size: Int, root: Digest, extensions: [String]) {
        self.origin = origin
        self.size = size
        self.root = root
        self.extensions = extensions
    }

    /// The origin of bench `benchID`'s ledger.
    public static func origin(bench benchID: String) -> String { "beaconbench.local/bench/" + benchID }

    /// The note text: what is signed.
    public var body: String {
        var text = origin + "\n" + String(size) + "\n" + Base64.encode(root.bytes) + "\n"
        for line in extensions { text += line + "\n" }
        return text
    }

    /// Reads a checkpoint's note text, strictly: at most `maxBody` bytes;
    /// every line ends in a newline and is non-empty; the origin has no
    /// white space, `+` or control character; the size is decimal digits
    /// without a leading zero (unless it is `0`) and fits an Int; the root
    /// is the canonical base64 of exactly 32 bytes; extension lines have no
    /// control character.
    public static func parse(_ body: String) throws(LedgerError) -> Checkpoint {
        guard body.utf8.count <= maxBody else {
            throw LedgerError("the checkpoint is \(body.utf8.count) bytes, more than \(maxBody)")
        }
        guard body.utf8.last == UInt8(ascii: "\n") else {
            throw LedgerError("the checkpoint does not end with a newline")
        }
        let lines = body.utf8.dropLast().split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
            .map { String(decoding: $0, as: UTF8.self) }
        guard lines.count >= 3 else {
            throw LedgerError("the checkpoint has \(lines.count) lines, not at least 3 (origin, size, root)")
        }
        for (number, line) in lines.enumerated() {
            guard !line.isEmpty else { throw LedgerError("line \(number + 1) of the checkpoint is empty") }
            guard !line.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7f }) else {
                throw LedgerError("line \(number + 1) of the checkpoint has a control character")
            }
        }
        let origin = lines[0]
        guard origin.utf8.count <= maxOrigin else {
            throw LedgerError("the checkpoint's origin is longer than \(maxOrigin) bytes")
        }
        guard !origin.unicodeScalars.contains(where: { $0.properties.isWhitespace || $0 == "+" }) else {
            throw LedgerError("the checkpoint's origin \(LedgerError.quoted(origin)) has a space or a plus sign")
        }
        guard let size = parseSize(lines[1]) else {
            throw LedgerError(
                "the checkpoint's tree size \(LedgerError.quoted(lines[1])) is not a decimal number without a leading zero that fits a 64-bit integer"
            )
        }
        guard let rootBytes = Base64.decode(lines[2]), let root = Digest(bytes: rootBytes) else {
            throw LedgerError(
                "the checkpoint's root hash \(LedgerError.quoted(lines[2])) is not the standard base64 of 32 bytes")
        }
        let extensions = Array(lines.dropFirst(3))
        guard extensions.count <= maxExtensions else {
            throw LedgerError("the checkpoint has \(extensions.count) extension lines, more than \(maxExtensions)")
        }
        if let long = extensions.firstIndex(where: { $0.utf8.count > maxExtensionLine }) {
            throw LedgerError("extension line \(long + 1) of the checkpoint is longer than \(maxExtensionLine) bytes")
        }
        return Checkpoint(unchecked: origin, size: size, root: root, extensions: extensions)
    }

    private static func parseSize(_ text: String) -> Int? {
        let digits = Array(text.utf8)
        guard !digits.isEmpty, digits.count <= 19,
            digits.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }),
            digits.count == 1 || digits[0] != UInt8(ascii: "0")
        else { return nil }
        return Int(text)
    }
}
