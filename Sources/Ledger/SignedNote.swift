/// A signed note as C2SP signed-note (https://c2sp.org/signed-note)
/// defines it: a text ending in a newline, a blank line, then one or more
/// signature lines `— <key name> <base64(4-byte key ID ‖ signature)>`.
public struct SignedNote: Sendable, Equatable {
    public struct Signature: Sendable, Equatable {
        /// The key name (for the ledger: the signer's principal in
        /// allowed_signers).
        public let name: String
        /// The 4-byte key ID, big-endian.
        public let keyID: [UInt8]
        /// What follows the key ID (for the ledger: an SSHSIG blob).
        public let signature: [UInt8]

        public init(name: String, keyID: [UInt8], signature: [UInt8]) {
            self.name = name
            self.keyID = keyID
            self.signature = signature
        }

        /// The signature line, newline included.
        public var line: String { "— " + name + " " + Base64.encode(keyID + signature) + "\n" }
    }

    /// The signed text, its final newline included.
    public let text: String
    public let signatures: [Signature]

    /// The largest note read (bytes) and the most signatures: the spec asks
    /// verifiers to accept at least 16.
    public static let maxNote = 64 * 1024
    public static let maxSignatures = 16
    public static let maxKeyName = 256

    public init(text: String, signatures: [Signature]) {
        self.text = text
        self.signatures = signatures
    }

    /// The note's bytes as text: the text, a blank line, the signature lines.
    public var serialized: String { text + "\n" + signatures.map(\.line).joined() }

    /// Whether `name` may be a key name: non-empty, at most `maxKeyName`
    /// bytes, no Unicode white space, no `+`, no control character (the
    /// spec's rules, and a principal as allowed_signers writes one: no `,`
    /// or `"` either).
    public static func isKeyName(_ name: some StringProtocol) -> Bool {
        !name.isEmpty && name.utf8.count <= maxKeyName
            && !name.unicodeScalars.contains {
                $0.properties.isWhitespace || $0 == "+" || $0 == "," || $0 == "\"" || $0.value < 0x20
                    || $0.value == 0x7f || $0.properties.generalCategory == .format
            }
    }

    /// Reads a signed note, strictly: at most `maxNote` bytes, no control
    /// character but newline, a blank line before the signatures (the last
    /// one in the note), at least one and at most `maxSignatures` signature
    /// lines, each an em dash, a space, a key name, a space and the
    /// canonical base64 of more than 4 bytes.
    public static func parse(_ note: String) throws(LedgerError) -> SignedNote {
        let bytes = Array(note.utf8)
        guard bytes.count <= maxNote else {
            throw LedgerError("the signed note is \(bytes.count) bytes, more than \(maxNote)")
        }
        if let bad = note.unicodeScalars.first(where: { ($0.value < 0x20 && $0 != "\n") || $0.value == 0x7f }) {
            throw LedgerError(
                "the signed note holds a control character (U+\(String(bad.value, radix: 16, uppercase: true)))")
        }
        guard bytes.last == UInt8(ascii: "\n") else { throw LedgerError("the signed note does not end with a newline") }
        // The text ends at the last blank line: the last "\n\n".
        var split: Int?
        var index = bytes.count - 2
        while index >= 0 {
            if bytes[index] == UInt8(ascii: "\n") && bytes[index + 1] == UInt8(ascii: "\n") {
                split = index
                break
            }
            index -= 1
        }
        guard let split else {
            throw LedgerError("the note has no signature: no blank line separates its text from signature lines")
        }
        let text = String(decoding: bytes[...split], as: UTF8.self)
        let lines = bytes[(split + 2)...].dropLast().split(
            separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
        guard split + 2 < bytes.count, !lines.isEmpty else {
            throw LedgerError("the note has no signature: nothing follows the blank line")
        }
        guard lines.count <= maxSignatures else {
            throw LedgerError("the note has \(lines.count) signature lines, more than \(maxSignatures)")
        }
        var signatures: [Signature] = []
        for (number, lineBytes) in lines.enumerated() {
            let line = String(decoding: lineBytes, as: UTF8.self)
            guard line.hasPrefix("— ") else {
                throw LedgerError(
                    "signature line \(number + 1) of the note does not begin with an em dash and a space: \(LedgerError.quoted(line))"
                )
            }
            let fields = line.dropFirst(2).split(separator: " ", omittingEmptySubsequences: false)
            guard fields.count == 2, isKeyName(fields[0]) else {
                throw LedgerError(
                    "signature line \(number + 1) of the note is not \"— <key name> <base64>\": \(LedgerError.quoted(line))"
                )
            }
            guard let decoded = Base64.decode(fields[1]), decoded.count > 4 else {
                throw LedgerError(
                    "the signature of \(LedgerError.quoted(fields[0])) (line \(number + 1)) is not the standard base64 of a key ID and a signature"
                )
            }
            signatures.append(
                Signature(name: String(fields[0]), keyID: Array(decoded[..<4]), signature: Array(decoded[4...])))
        }
        return SignedNote(text: text, signatures: signatures)
    }
}
