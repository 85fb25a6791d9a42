/// The Device Information strings (model, serial, hardware and firmware
/// revision, manufacturer): UTF-8, and — as many firmwares send them —
/// possibly NUL-terminated or NUL-padded to a fixed length. The text ends
/// at the first NUL; what follows it is padding, not part of the value.
///
/// What a device sends is not trusted: at most the ATT maximum of 512 bytes
/// is taken (a longer value cannot come over the air), and bytes that are
/// not UTF-8 become U+FFFD, as every UTF-8 decoder does. The text is stored
/// and given in JSON as decoded, and shown only through `Visible.text`.
public enum DeviceInformationText {
    /// The longest attribute value ATT carries (Core spec, Vol 3, Part F, 3.2.9).
    public static let maximumLength = 512

    public static func decode(_ bytes: [UInt8]) -> String {
        let value = bytes.prefix(maximumLength)
        let end = value.firstIndex(of: 0) ?? value.endIndex
        return String(decoding: value[..<end], as: UTF8.self)
    }

    /// The start of a device's text as a message quotes it: at most
    /// `limit` characters, then `…`. (Messages are shown through the
    /// console's display function, which makes control characters visible.)
    public static func excerpt(_ text: String, limit: Int = 40) -> String {
        text.count <= limit ? text : String(text.prefix(limit)) + "…"
    }
}
