# The stack only: bluetoothd's view of the adapter and of the beacons it
# discovers (held by bench.py's own discovery client, see docs/realstack.md).
busctl --system introspect org.bluez /org/bluez/hci0 > "$out/adapter.txt" 2>&1
note "adapter: $(busctl --system get-property org.bluez /org/bluez/hci0 org.bluez.Adapter1 Address)"
