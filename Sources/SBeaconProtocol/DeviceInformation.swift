/// The Device Information strings (model, serial, hardware and firmware
/// revision, manufacturer): UTF-8, and — as many firmwares send them —
/// possibly NUL-terminated or NUL-padded to a fixed length. The text ends
/// at the first NUL; what follows it is padding, not part of the value.
public enum DeviceInformationText {
    public static func decode(_ bytes: [UInt8]) -> String {
        let end = bytes.firstIndex(of: 0) ?? bytes.endIndex
        return String(decoding: bytes[..<end], as: UTF8.self)
    }
}
