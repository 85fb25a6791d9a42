import CDBus

/// libdbus-1's macros that Swift cannot import, defined once.
///
/// `DBUS_TYPE_STRING` and friends are written `((int) 's')` in
/// `dbus-protocol.h`; the importer skips macros with casts, so the codes live
/// here and nowhere else.
enum LibDBus {
    enum TypeCode {
        static let invalid: Int32 = 0
        static let byte = Int32(UInt8(ascii: "y"))
        static let boolean = Int32(UInt8(ascii: "b"))
        static let int16 = Int32(UInt8(ascii: "n"))
        static let uint16 = Int32(UInt8(ascii: "q"))
        static let int32 = Int32(UInt8(ascii: "i"))
        static let uint32 = Int32(UInt8(ascii: "u"))
        static let int64 = Int32(UInt8(ascii: "x"))
        static let uint64 = Int32(UInt8(ascii: "t"))
        static let double = Int32(UInt8(ascii: "d"))
        static let string = Int32(UInt8(ascii: "s"))
        static let objectPath = Int32(UInt8(ascii: "o"))
        static let signature = Int32(UInt8(ascii: "g"))
        static let unixFD = Int32(UInt8(ascii: "h"))
        static let array = Int32(UInt8(ascii: "a"))
        static let variant = Int32(UInt8(ascii: "v"))
        /// `DBUS_TYPE_STRUCT` is `r` in iterators, `(` in signatures.
        static let structure = Int32(UInt8(ascii: "r"))
        /// `DBUS_TYPE_DICT_ENTRY` is `e` in iterators, `{` in signatures.
        static let dictEntry = Int32(UInt8(ascii: "e"))
    }

    enum MessageType {
        static let methodCall: Int32 = 1
        static let methodReturn: Int32 = 2
        static let error: Int32 = 3
        static let signal: Int32 = 4
    }

    enum WatchFlags {
        static let readable: UInt32 = 1
        static let writable: UInt32 = 2
        static let error: UInt32 = 4
        static let hangup: UInt32 = 8
    }

    /// Longest name libdbus accepts (`DBUS_MAXIMUM_NAME_LENGTH`).
    static let maximumNameLength = 255
    /// Longest signature (`DBUS_MAXIMUM_SIGNATURE_LENGTH`).
    static let maximumSignatureLength = 255

    /// Runs one of libdbus' `dbus_validate_*` / `dbus_signature_validate`
    /// functions on `string`, refusing first what libdbus would misread
    /// (interior NUL bytes).
    static func validate(
        _ string: String,
        with check: (UnsafePointer<CChar>, UnsafeMutablePointer<DBusError>?) -> dbus_bool_t
    ) -> Bool {
        guard !string.utf8.contains(0) else { return false }
        return string.withCString { check($0, nil) } != 0
    }

    /// Calls `dbus_threads_init_default()` exactly once per process.
    static let threadsInitialised: Bool = {
        dbus_threads_init_default() != 0
    }()
}
