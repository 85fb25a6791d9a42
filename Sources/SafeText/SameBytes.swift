/// The rule for comparing stored values (docs/development.md, "Stored
/// values are compared as bytes"): a value read from the inventory, the
/// server, a beacon or a file is compared as its bytes, or as a type whose
/// equality is bytewise — never as a Swift `String`.
///
/// Swift's `String` compares by canonical equivalence: `"é" == "e\u{301}"`
/// and `"Å" == "\u{212B}"` (the Ångström sign) are true, and so is
/// `"K" == "\u{212A}"` (the Kelvin sign), although the bytes differ. A
/// check that compares stored text as `String`s therefore passes a value
/// someone rewrote into a canonically equivalent form; and a `Set<String>`
/// or a `[String: …]` keyed by stored text takes two such values for one
/// key. Stored text is compared with `sameBytes` instead, and kept as a
/// key by its bytes (`Array(text.utf8)`); the value types that compare
/// stored values (`SQLiteValue`, `JSONValue`, `CanonicalJSON.Value`) compare
/// their text this way in their `==` and `hash(into:)`.
extension StringProtocol {
    /// Whether `self` and `other` are the same UTF-8 bytes (not merely
    /// canonically equivalent, as `==` asks).
    @inlinable
    public func sameBytes(_ other: some StringProtocol) -> Bool {
        utf8.count == other.utf8.count && utf8.elementsEqual(other.utf8)
    }
}

extension StringProtocol {
    /// When `self` and `other` are the same text to `==` (canonically
    /// equivalent) but not the same bytes, words that say so with both
    /// byte sequences in hex (the first 24 bytes of each), for a finding
    /// whose two values would otherwise look alike; nil otherwise.
    public func otherBytesNote(_ other: some StringProtocol) -> String? {
        guard String(self) == String(other), !sameBytes(other) else { return nil }
        func hex(_ text: some StringProtocol) -> String {
            let bytes = Array(text.utf8)
            return bytes.prefix(24).map { CFormat.string("%02x", $0) }.joined(separator: " ")
                + (bytes.count > 24 ? " …" : "")
        }
        return "the same text in another Unicode form: bytes \(hex(self)) against \(hex(other))"
    }
}

extension Optional where Wrapped: StringProtocol {
    /// Both nil, or both text of the same UTF-8 bytes.
    @inlinable
    public func sameBytes(_ other: Wrapped?) -> Bool {
        switch (self, other) {
        case (nil, nil): true
        case (let a?, let b?): a.sameBytes(b)
        default: false
        }
    }
}

extension Sequence where Element: StringProtocol {
    /// Whether the sequence holds text of the same UTF-8 bytes as `text`
    /// (`contains` would take a canonically equivalent one).
    @inlinable
    public func containsSameBytes(_ text: some StringProtocol) -> Bool {
        contains { $0.sameBytes(text) }
    }

    /// Whether both sequences hold text of the same bytes, in the same order.
    @inlinable
    public func sameBytes<Other: Sequence>(_ other: Other) -> Bool where Other.Element: StringProtocol {
        elementsEqual(other) { $0.sameBytes($1) }
    }
}
