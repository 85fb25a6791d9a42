# The tool's main job through the real stack, as a new user runs it: scan,
# provision-new.batch twice (the second must write nothing: the beacons'
# own write counters, read from the beacon side, hold it), audit from
# adverts and live, doctor.
source "$REALSTACK_DIR/scenarios/lib.sh"
provision_steps
audit_step
step doctor 0 bb doctor
save_inventory
