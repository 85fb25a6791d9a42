/// OpenSSH's signature format (`ssh-keygen -Y sign`, PROTOCOL.sshsig): the
/// blob, its armor, and the signed-note key ID the ledger gives an SSH key
/// (docs/ledger.md, "Checkpoints").
public enum SSHSignature {
    /// The namespace every ledger signature is made in (`-n`).
    public static let namespace = "beaconbench-ledger"

    /// What follows signed-note's signature type byte 0xff for these
    /// signatures: an identifier of our own, as the spec recommends.
    public static let signatureType: [UInt8] = [0xff] + Array("beaconbench-sshsig".utf8)

    /// The largest SSHSIG blob accepted (an RSA-16384 signature and key fit).
    public static let maxBlob = 16 * 1024

    /// The parts of an SSHSIG blob.
    public struct Blob: Sendable, Equatable {
        /// The signer's public key in SSH wire encoding (the bytes base64
        /// encodes in a `.pub` or allowed_signers line).
        public let publicKey: [UInt8]
        public let namespace: String
        public let hashAlgorithm: String
    }

    /// Reads an SSHSIG blob: the magic `SSHSIG`, version 1, then the
    /// strings publickey, namespace, reserved, hash_algorithm and
    /// signature, and nothing after them.
    public static func parse(blob: [UInt8]) -> Blob? {
        guard blob.count <= maxBlob, blob.count > 10, Array(blob[0..<6]) == Array("SSHSIG".utf8) else { return nil }
        var offset = 6
        func uint32() -> Int? {
            guard offset + 4 <= blob.count else { return nil }
            let value = blob[offset..<offset + 4].reduce(0) { $0 << 8 | Int($1) }
            offset += 4
            return value
        }
        func string() -> [UInt8]? {
            guard let length = uint32(), length <= blob.count - offset else { return nil }
            defer { offset += length }
            return Array(blob[offset..<offset + length])
        }
        guard uint32() == 1, let publicKey = string(), let namespace = string(), string() != nil,
            let hash = string(), string() != nil, offset == blob.count,
            let namespaceText = String(validating: namespace, as: UTF8.self),
            let hashText = String(validating: hash, as: UTF8.self)
        else { return nil }
        return Blob(publicKey: publicKey, namespace: namespaceText, hashAlgorithm: hashText)
    }

    /// The signed-note key ID: the first 4 bytes of
    /// SHA-256(key name ‖ 0x0A ‖ 0xFF ‖ "beaconbench-sshsig" ‖ public key).
    public static func keyID(name: String, publicKey: [UInt8]) throws(CryptoUnavailable) -> [UInt8] {
        Array(try Digest.sha256(Array(name.utf8) + [0x0a] + signatureType + publicKey).bytes.prefix(4))
    }

    /// The blob as `ssh-keygen -Y sign` writes it: the armor lines around
    /// its base64, wrapped at 70 columns.
    public static func armor(_ blob: [UInt8]) -> String {
        let text = Array(Base64.encode(blob).utf8)
        var out = "-----BEGIN SSH SIGNATURE-----\n"
        var start = 0
        while start < text.count {
            let end = min(start + 70, text.count)
            out += String(decoding: text[start..<end], as: UTF8.self) + "\n"
            start = end
        }
        return out + "-----END SSH SIGNATURE-----\n"
    }

    /// The blob inside ssh-keygen's armor, or nil when `text` is not
    /// exactly that armor.
    public static func unarmor(_ text: String) -> [UInt8]? {
        var lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        guard lines.count >= 4, lines.first == "-----BEGIN SSH SIGNATURE-----", lines.last == "",
            lines[lines.count - 2] == "-----END SSH SIGNATURE-----"
        else { return nil }
        lines = Array(lines[1..<lines.count - 2])
        guard let blob = Base64.decode(lines.joined()), armor(blob) == text else { return nil }
        return blob
    }
}
