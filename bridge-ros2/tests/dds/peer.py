"""The ROS 2 side of the bridge tests: Eclipse Cyclone DDS 11.0.1 (PyPI) speaking ROS 2's DDS conventions
(topics rt/<name>, types pkg::msg::dds_::T_, XCDR1), with rosbags as the independent CDR serializer.

Every message number i is built with rosbags exactly as bridge-ros2/src/testdata.rs builds it, serialized by
rosbags, and turned into the Cyclone object by Cyclone's own deserializer; a receiver compares Cyclone's
serialization of what arrived with rosbags' bytes of message i. Prints JSON lines: ready, done, summary, ...

  peer.py pub  TYPE TOPIC COUNT SIZE [--best-effort] [--bad N] [--rate HZ] [--first I] [--delay S]
  peer.py sub  TYPE TOPIC COUNT SIZE [--timeout S] [--first I]
               (messages --first .. --first+COUNT-1, default 1..COUNT; a sub counts others apart, as "other")
  peer.py echo TOPIC_IN TOPIC_OUT [--timeout S]          (std_msgs/UInt8MultiArray, for the benchmark)
  peer.py discovery NODE_NAME [--timeout S]               (ros_discovery_info: the node `ros2 node list` shows)
  peer.py rtt  TOPIC_PING TOPIC_PONG SIZE COUNT           (Cyclone -> echo -> Cyclone baseline)
  peer.py tput TOPIC_PING TOPIC_PONG SIZE COUNT [--window W]  (throughput: up to W messages in flight)
  peer.py oracle FILE                                     (lines: TYPE INDEX SIZE HEX; compare with rosbags)
  peer.py srv_server KIND SERVICE [--delay-ms D] [--timeout S]   (a ROS 2 service server, as rmw_cyclonedds)
  peer.py srv_client KIND SERVICE COUNT [--timeout-ms T]         (a ROS 2 service client, as rmw_cyclonedds)
  peer.py action_server NAME [--timeout S]                        (the DDS endpoints of an action server, only)

Services are what rmw_cyclonedds puts on DDS: requests on rq/<name>Request (pkg::srv::dds_::T_Request_), replies
on rr/<name>Reply (T_Response_), each sample starting with the request id (client: uint64, seq: int64) that the
reply returns. KINDs: trigger, set_bool, empty (std_srvs) and scale (demo_msgs/srv/Scale); the server answers as
testdata.rs's service_response does, and the client checks every reply against it.
"""
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from cyclonedds.core import Policy, Qos
from cyclonedds.domain import DomainParticipant
from cyclonedds.idl import IdlStruct
from cyclonedds.idl.types import (array, bounded_str, float32, float64, int8, int16, int32, int64, sequence, uint8,
                                  uint16, uint32, uint64)
from cyclonedds.pub import DataWriter
from cyclonedds.sub import DataReader
from cyclonedds.topic import Topic
from cyclonedds.util import duration
from rosbags.typesys import Stores, get_types_from_msg, get_typestore

TS = get_typestore(Stores.ROS2_JAZZY)
# The generic-mapping tests' custom types, registered in rosbags from the same .msg files the bridge reads.
DEMO_MSG = Path(__file__).resolve().parent.parent / "demo" / "msg" / "demo_msgs" / "msg"
_demo = {}
for _name in ("Wheel", "Telemetry"):
    _demo.update(get_types_from_msg((DEMO_MSG / f"{_name}.msg").read_text(), f"demo_msgs/msg/{_name}"))
TS.register(_demo)
T = TS.types


def out(**kw):
    print(json.dumps(kw), flush=True)


# ---- Cyclone IDL structs: the ROS 2 DDS types -------------------------------------------------------------
@dataclass
class Time_(IdlStruct, typename="builtin_interfaces::msg::dds_::Time_"):
    sec: int32
    nanosec: uint32


@dataclass
class Header_(IdlStruct, typename="std_msgs::msg::dds_::Header_"):
    stamp: Time_
    frame_id: str


@dataclass
class String_(IdlStruct, typename="std_msgs::msg::dds_::String_"):
    data: str


@dataclass
class MultiArrayDimension_(IdlStruct, typename="std_msgs::msg::dds_::MultiArrayDimension_"):
    label: str
    size: uint32
    stride: uint32


@dataclass
class MultiArrayLayout_(IdlStruct, typename="std_msgs::msg::dds_::MultiArrayLayout_"):
    dim: sequence[MultiArrayDimension_]
    data_offset: uint32


@dataclass
class UInt8MultiArray_(IdlStruct, typename="std_msgs::msg::dds_::UInt8MultiArray_"):
    layout: MultiArrayLayout_
    data: sequence[uint8]


@dataclass
class Vector3_(IdlStruct, typename="geometry_msgs::msg::dds_::Vector3_"):
    x: float64
    y: float64
    z: float64


@dataclass
class Quaternion_(IdlStruct, typename="geometry_msgs::msg::dds_::Quaternion_"):
    x: float64
    y: float64
    z: float64
    w: float64


@dataclass
class Imu_(IdlStruct, typename="sensor_msgs::msg::dds_::Imu_"):
    header: Header_
    orientation: Quaternion_
    orientation_covariance: array[float64, 9]
    angular_velocity: Vector3_
    angular_velocity_covariance: array[float64, 9]
    linear_acceleration: Vector3_
    linear_acceleration_covariance: array[float64, 9]


@dataclass
class Image_(IdlStruct, typename="sensor_msgs::msg::dds_::Image_"):
    header: Header_
    height: uint32
    width: uint32
    encoding: str
    is_bigendian: uint8
    step: uint32
    data: sequence[uint8]


@dataclass
class PointField_(IdlStruct, typename="sensor_msgs::msg::dds_::PointField_"):
    name: str
    offset: uint32
    datatype: uint8
    count: uint32


@dataclass
class PointCloud2_(IdlStruct, typename="sensor_msgs::msg::dds_::PointCloud2_"):
    header: Header_
    height: uint32
    width: uint32
    fields: sequence[PointField_]
    is_bigendian: bool
    point_step: uint32
    row_step: uint32
    data: sequence[uint8]
    is_dense: bool


# ros_discovery_info (Iron and later: 16-byte GIDs), what `ros2 node list` reads to name the nodes of a participant.
@dataclass
class Gid_(IdlStruct, typename="rmw_dds_common::msg::dds_::Gid_"):
    data: array[uint8, 16]


@dataclass
class NodeEntitiesInfo_(IdlStruct, typename="rmw_dds_common::msg::dds_::NodeEntitiesInfo_"):
    node_namespace: str
    node_name: str
    reader_gid_seq: sequence[Gid_]
    writer_gid_seq: sequence[Gid_]


@dataclass
class ParticipantEntitiesInfo_(IdlStruct, typename="rmw_dds_common::msg::dds_::ParticipantEntitiesInfo_"):
    gid: Gid_
    node_entities_info_seq: sequence[NodeEntitiesInfo_]


# The generic-mapping tests' custom type, as an IDL-defined Cyclone type (no ROS code generator involved).
@dataclass
class Duration_(IdlStruct, typename="builtin_interfaces::msg::dds_::Duration_"):
    sec: int32
    nanosec: uint32


@dataclass
class Point_(IdlStruct, typename="geometry_msgs::msg::dds_::Point_"):
    x: float64
    y: float64
    z: float64


@dataclass
class Pose_(IdlStruct, typename="geometry_msgs::msg::dds_::Pose_"):
    position: Point_
    orientation: Quaternion_


@dataclass
class Wheel_(IdlStruct, typename="demo_msgs::msg::dds_::Wheel_"):
    name: str
    speed: float64
    ticks: uint32
    slipping: bool


@dataclass
class Telemetry_(IdlStruct, typename="demo_msgs::msg::dds_::Telemetry_"):
    header: Header_
    pose: Pose_
    wheels: array[Wheel_, 4]
    spare: sequence[Wheel_]
    temperatures: sequence[float32]
    gyro: array[float64, 3]
    errors: sequence[int16, 8]
    name: bounded_str[32]
    tags: sequence[str]
    blob: sequence[uint8]
    mode: uint8
    ok: bool
    trim: int8
    flags: uint8
    grade: uint8
    volts: uint16
    seq: int64
    counter: uint64
    uptime: Duration_


# ---- services, as rmw_cyclonedds maps them: the request id first, then the message's fields ----------------
@dataclass
class Trigger_Request_(IdlStruct, typename="std_srvs::srv::dds_::Trigger_Request_"):
    client: uint64
    seq: int64
    structure_needs_at_least_one_member: uint8


@dataclass
class Trigger_Response_(IdlStruct, typename="std_srvs::srv::dds_::Trigger_Response_"):
    client: uint64
    seq: int64
    success: bool
    message: str


@dataclass
class SetBool_Request_(IdlStruct, typename="std_srvs::srv::dds_::SetBool_Request_"):
    client: uint64
    seq: int64
    data: bool


@dataclass
class SetBool_Response_(IdlStruct, typename="std_srvs::srv::dds_::SetBool_Response_"):
    client: uint64
    seq: int64
    success: bool
    message: str


@dataclass
class Empty_Request_(IdlStruct, typename="std_srvs::srv::dds_::Empty_Request_"):
    client: uint64
    seq: int64
    structure_needs_at_least_one_member: uint8


@dataclass
class Empty_Response_(IdlStruct, typename="std_srvs::srv::dds_::Empty_Response_"):
    client: uint64
    seq: int64
    structure_needs_at_least_one_member: uint8


@dataclass
class Scale_Request_(IdlStruct, typename="demo_msgs::srv::dds_::Scale_Request_"):
    client: uint64
    seq: int64
    wheel: Wheel_
    factors: sequence[float64]
    times: int32


@dataclass
class Scale_Response_(IdlStruct, typename="demo_msgs::srv::dds_::Scale_Response_"):
    client: uint64
    seq: int64
    wheels: sequence[Wheel_]
    note: str


SERVICES = {"trigger": (Trigger_Request_, Trigger_Response_), "set_bool": (SetBool_Request_, SetBool_Response_),
            "empty": (Empty_Request_, Empty_Response_), "scale": (Scale_Request_, Scale_Response_)}


def srv_request(kind, i, client):
    """Request number i of kind (testdata.rs's service_request)."""
    Req = SERVICES[kind][0]
    if kind == "set_bool":
        return Req(client=client, seq=i, data=i % 2 == 1)
    if kind == "scale":
        wheel = Wheel_(name=f"w{i}", speed=i * 0.5, ticks=i, slipping=i % 2 == 1)
        return Req(client=client, seq=i, wheel=wheel, factors=[1.0, 2.5, float(i)], times=i % 3 + 1)
    return Req(client=client, seq=i, structure_needs_at_least_one_member=0)


def srv_response(kind, req):
    """The answer to req (testdata.rs's service_response), with req's request id."""
    Resp = SERVICES[kind][1]
    head = dict(client=req.client, seq=req.seq)
    if kind == "trigger":
        return Resp(**head, success=True, message="triggered")
    if kind == "set_bool":
        return Resp(**head, success=req.data, message=f"data is {str(req.data).lower()}")
    if kind == "scale":
        w = req.wheel
        wheels = [Wheel_(name=w.name, speed=w.speed * f, ticks=(w.ticks * req.times) % 2**32, slipping=w.slipping)
                  for f in req.factors]
        return Resp(**head, wheels=wheels, note=f"{w.name} x{len(req.factors) * req.times}")
    return Resp(**head, structure_needs_at_least_one_member=0)


def srv_endpoints(dp, kind, service, server):
    Req, Resp = SERVICES[kind]
    q = qos(False)
    rq = Topic(dp, f"rq{service}Request", Req, qos=q)
    rr = Topic(dp, f"rr{service}Reply", Resp, qos=q)
    if server:
        return DataReader(dp, rq, qos=qos(False, depth=100)), DataWriter(dp, rr, qos=q)
    return DataReader(dp, rr, qos=qos(False, depth=100)), DataWriter(dp, rq, qos=q)


# Stand-ins with an action's DDS type names: the bridge reads only the names of an action's endpoints.
@dataclass
class Fibonacci_SendGoal_Request_(IdlStruct, typename="example_interfaces::action::dds_::Fibonacci_SendGoal_Request_"):
    client: uint64
    seq: int64
    order: int32


@dataclass
class GoalStatusArray_(IdlStruct, typename="action_msgs::msg::dds_::GoalStatusArray_"):
    count: uint32


# A writer whose samples carry the Imu type name but not an Imu's bytes: CDR the bridge cannot decode.
@dataclass
class BadImu_(IdlStruct, typename="sensor_msgs::msg::dds_::Imu_"):
    junk: str


CYCLONE = {"string": String_, "imu": Imu_, "image": Image_, "pointcloud2": PointCloud2_, "raw": UInt8MultiArray_,
           "telemetry": Telemetry_}
ROSNAME = {
    "string": "std_msgs/msg/String",
    "imu": "sensor_msgs/msg/Imu",
    "image": "sensor_msgs/msg/Image",
    "pointcloud2": "sensor_msgs/msg/PointCloud2",
    "pose_stamped": "geometry_msgs/msg/PoseStamped",
    "twist": "geometry_msgs/msg/Twist",
    "transform_stamped": "geometry_msgs/msg/TransformStamped",
    "nav_sat_fix": "sensor_msgs/msg/NavSatFix",
    "raw": "std_msgs/msg/UInt8MultiArray",
    "telemetry": "demo_msgs/msg/Telemetry",
}


# ---- the messages of testdata.rs, built with rosbags ------------------------------------------------------
def header(i, frame):
    return T["std_msgs/msg/Header"](stamp=T["builtin_interfaces/msg/Time"](sec=i, nanosec=(i * 1000) % 2**32), frame_id=frame)


def pattern(i, n):
    return ((np.arange(n, dtype=np.int64) + i) % 251).astype(np.uint8)


# testdata.rs RAW_TYPE: the shoal type name a raw payload is announced as, carried in layout.dim[0].label.
RAW_TYPE = "shoal_test.Blob"


def raw(i, size):
    p = pattern(i, max(4, size))
    p[0:4] = np.frombuffer(i.to_bytes(4, "little"), dtype=np.uint8)
    return p


def build(kind, i, size):
    V3, Q = T["geometry_msgs/msg/Vector3"], T["geometry_msgs/msg/Quaternion"]
    if kind == "raw":
        data = raw(i, size)
        dim = T["std_msgs/msg/MultiArrayDimension"](label=RAW_TYPE, size=len(data), stride=len(data))
        return T["std_msgs/msg/UInt8MultiArray"](layout=T["std_msgs/msg/MultiArrayLayout"](dim=[dim], data_offset=0),
                                                 data=data)
    f = float(i)
    k = np.arange(9, dtype=np.float64)
    if kind == "string":
        return T["std_msgs/msg/String"](data=f"hello {i}")
    if kind == "imu":
        return T["sensor_msgs/msg/Imu"](
            header=header(i, "imu"),
            orientation=Q(x=f + 0.5, y=0.25, z=-f, w=1.0), orientation_covariance=k + f,
            angular_velocity=V3(x=0.5 * f, y=1.5, z=-2.0), angular_velocity_covariance=0.125 * k,
            linear_acceleration=V3(x=9.75, y=f, z=0.0), linear_acceleration_covariance=-k)
    if kind == "image":
        h = max(1, size // 3072)
        return T["sensor_msgs/msg/Image"](header=header(i, "camera"), height=h, width=1024, encoding="rgb8",
                                          is_bigendian=0, step=3072, data=pattern(i, 3072 * h))
    if kind == "pointcloud2":
        w = max(1, size // 16)
        PF = T["sensor_msgs/msg/PointField"]
        return T["sensor_msgs/msg/PointCloud2"](
            header=header(i, "lidar"), height=1, width=w,
            fields=[PF(name=n, offset=o, datatype=7, count=1) for n, o in (("x", 0), ("y", 4), ("z", 8))],
            is_bigendian=False, point_step=16, row_step=16 * w, data=pattern(i, 16 * w), is_dense=True)
    if kind == "pose_stamped":
        P = T["geometry_msgs/msg/Point"]
        return T["geometry_msgs/msg/PoseStamped"](header=header(i, "map"), pose=T["geometry_msgs/msg/Pose"](
            position=P(x=f, y=-f, z=0.5), orientation=Q(x=0.0, y=0.0, z=0.5, w=0.75)))
    if kind == "twist":
        return T["geometry_msgs/msg/Twist"](linear=V3(x=f, y=0.0, z=0.0), angular=V3(x=0.0, y=0.0, z=-0.25 * f))
    if kind == "transform_stamped":
        return T["geometry_msgs/msg/TransformStamped"](header=header(i, "odom"), child_frame_id="base_link",
                                                       transform=T["geometry_msgs/msg/Transform"](
                                                           translation=V3(x=f, y=2.0, z=3.0), rotation=Q(x=0.0, y=0.0, z=0.0, w=1.0)))
    if kind == "nav_sat_fix":
        return T["sensor_msgs/msg/NavSatFix"](header=header(i, "gps"),
                                              status=T["sensor_msgs/msg/NavSatStatus"](status=-1, service=1),
                                              latitude=48.0 + f / 1024.0, longitude=11.5, altitude=520.25,
                                              position_covariance=k.copy(), position_covariance_type=2)
    if kind == "telemetry":
        # testdata.rs telemetry(i, size)
        W, Ti = T["demo_msgs/msg/Wheel"], T["builtin_interfaces/msg/Time"]
        wheel = lambda k: W(name=f"w{k}", speed=f + k * 0.5, ticks=i * 10 + k, slipping=k % 2 == 1)
        return T["demo_msgs/msg/Telemetry"](
            header=T["std_msgs/msg/Header"](stamp=Ti(sec=i, nanosec=(i * 1000) % 2**32), frame_id="base_link"),
            pose=T["geometry_msgs/msg/Pose"](position=T["geometry_msgs/msg/Point"](x=f, y=-f, z=0.25),
                                             orientation=Q(x=0.0, y=0.0, z=0.5, w=0.75)),
            wheels=[wheel(k) for k in range(4)], spare=[wheel(10 + k) for k in range(i % 3)],
            temperatures=np.array([20.5, 21.25 + (i % 8)], dtype=np.float32),
            gyro=np.array([0.125 * f, -0.5, 1.0], dtype=np.float64),
            errors=np.array([k * 7 - 20 for k in range(i % 9)], dtype=np.int16),
            name=f"rover {i}", tags=["a", f"t{i}"], blob=pattern(i, size), mode=i % 2, ok=i % 2 == 0,
            trim=-(i % 100), flags=i % 256, grade=65 + i % 26, volts=12000 + i % 1000, seq=-i * 1_000_000_007,
            counter=i << 40, uptime=T["builtin_interfaces/msg/Duration"](sec=i * 60, nanosec=5))
    raise SystemExit(f"unknown kind {kind}")


def cdr(kind, i, size):
    return bytes(TS.serialize_cdr(build(kind, i, size), ROSNAME[kind]))


def unpad(b):
    # Some serializers pad the payload to a multiple of 4; compare without trailing zero padding of < 4 bytes.
    return b


def index_of(kind, obj):
    if kind == "raw":
        return int.from_bytes(bytes(obj.data[0:4]), "little")
    if kind == "string":
        return int(obj.data.split()[1])
    return obj.header.stamp.sec


def qos(best_effort, depth=10, transient_local=False):
    rel = Policy.Reliability.BestEffort if best_effort else Policy.Reliability.Reliable(duration(seconds=2))
    dur = Policy.Durability.TransientLocal if transient_local else Policy.Durability.Volatile
    return Qos(rel, dur, Policy.History.KeepLast(depth),
               Policy.DataRepresentation(use_cdrv0_representation=True))


def arg(name, default, conv=float):
    if name in sys.argv:
        return conv(sys.argv[sys.argv.index(name) + 1])
    return default


def has_matches(get_matched):
    """Whether an entity has a match. cyclonedds sizes the list from a first count and fills it with a second call,
    which returns the count of that moment: a match made in between makes it index past the list (IndexError),
    and there is a match then."""
    try:
        return bool(get_matched())
    except IndexError:
        return True


def wait_matched(w, timeout):
    end = time.time() + timeout
    while not has_matches(w.get_matched_subscriptions):
        if time.time() > end:
            out(event="error", message="no matched subscription")
            sys.exit(2)
        time.sleep(0.05)


def main():
    mode = sys.argv[1]
    dp = DomainParticipant(int(arg("--domain", 0, int)))
    if mode == "pub":
        kind, topic, count, size = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
        best_effort = "--best-effort" in sys.argv
        tl = "--transient-local" in sys.argv
        t = Topic(dp, "rt" + topic, CYCLONE[kind], qos=qos(best_effort, transient_local=tl))
        w = DataWriter(dp, t, qos=qos(best_effort, transient_local=tl))
        out(event="ready")
        if "--no-wait" in sys.argv:
            pass  # a transient-local writer keeps its history for readers yet to come
        elif best_effort:
            time.sleep(arg("--linger", 3.0))  # no match status worth waiting for: the reader may refuse it
        else:
            wait_matched(w, arg("--timeout", 20.0))
        time.sleep(0.5)  # let the reader's side of discovery settle
        time.sleep(arg("--delay", 0.0))  # more readers to come (a bridge's automatic route)
        bad = int(arg("--bad", 0, int))
        if bad:
            bt = Topic(dp, "rt" + topic, BadImu_, qos=qos(False))
            bw = DataWriter(dp, bt, qos=qos(False))
            wait_matched(bw, arg("--timeout", 20.0))
            for _ in range(bad):
                bw.write(BadImu_(junk="x"))
            time.sleep(0.5)
        period = 1.0 / arg("--rate", 50.0)
        first = int(arg("--first", 1, int))
        for i in range(first, first + count):
            w.write(CYCLONE[kind].deserialize(cdr(kind, i, size)))
            time.sleep(period)
        out(event="done", sent=count)
        time.sleep(arg("--linger", 2.0))
    elif mode == "sub":
        kind, topic, count, size = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
        tl = "--transient-local" in sys.argv
        t = Topic(dp, "rt" + topic, CYCLONE[kind], qos=qos(False, transient_local=tl))
        r = DataReader(dp, t, qos=qos(False, depth=100, transient_local=tl))
        out(event="ready")
        first = int(arg("--first", 1, int))
        want = range(first, first + count)
        seen, bad, dup, other = set(), [], 0, 0
        end = time.time() + arg("--timeout", 30.0)
        while len(seen) < count and time.time() < end:
            got = r.take(N=10)
            if not got:
                time.sleep(0.005)
                continue
            for s in got:
                if not s.sample_info.valid_data:
                    continue
                i = index_of(kind, s)
                if i not in want:
                    other += 1
                    continue
                if i in seen:
                    dup += 1
                if s.serialize() != cdr(kind, i, size):
                    bad.append(i)
                seen.add(i)
        missing = sorted(set(want) - seen)
        out(event="summary", received=len(seen), intact=len(seen) - len(bad), bad=bad[:10], duplicates=dup,
            missing=missing[:20], timed_out=len(seen) < count, other=other)
    elif mode == "echo":
        tin, tout = sys.argv[2], sys.argv[3]
        ti = Topic(dp, "rt" + tin, UInt8MultiArray_, qos=qos(False))
        to = Topic(dp, "rt" + tout, UInt8MultiArray_, qos=qos(False))
        r = DataReader(dp, ti, qos=qos(False, depth=100))
        w = DataWriter(dp, to, qos=qos(False))
        out(event="ready")
        n, end = 0, time.time() + arg("--timeout", 120.0)
        while time.time() < end:
            for s in r.take(N=10):
                if s.sample_info.valid_data:
                    w.write(s)
                    n += 1
            time.sleep(0.0002)
        out(event="summary", echoed=n)
    elif mode == "rtt":
        tping, tpong, size, count = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
        tp = Topic(dp, "rt" + tping, UInt8MultiArray_, qos=qos(False))
        tq = Topic(dp, "rt" + tpong, UInt8MultiArray_, qos=qos(False))
        w = DataWriter(dp, tp, qos=qos(False))
        r = DataReader(dp, tq, qos=qos(False, depth=100))
        out(event="ready")
        wait_matched(w, 20.0)
        time.sleep(1.0)
        payload = bytearray(size)
        rtts, lost = [], 0
        t_start = time.time()
        for i in range(count):
            payload[0:4] = i.to_bytes(4, "little")
            msg = UInt8MultiArray_(layout=MultiArrayLayout_(dim=[], data_offset=0), data=bytes(payload))
            t0 = time.perf_counter()
            w.write(msg)
            end = t0 + 5.0
            got = False
            while time.perf_counter() < end and not got:
                for s in r.take(N=10):
                    if s.sample_info.valid_data and int.from_bytes(bytes(s.data[0:4]), "little") == i:
                        got = True
                if not got:
                    time.sleep(0.00005)
            if got:
                rtts.append((time.perf_counter() - t0) * 1e6)
            else:
                lost += 1
        wall = time.time() - t_start
        rtts.sort()
        pct = lambda p: rtts[min(len(rtts) - 1, int(p * len(rtts)))] if rtts else None
        out(event="summary", size=size, count=count, received=len(rtts), lost=lost, p50_us=pct(0.5), p90_us=pct(0.9),
            p99_us=pct(0.99), msgs_per_s=len(rtts) / wall, mb_per_s=len(rtts) * size / wall / 1e6)
    elif mode == "tput":
        # Throughput of the same path: up to W messages in flight (sent and not yet echoed), COUNT in all; a
        # message not back within 5 s of the last progress counts as lost.
        tping, tpong, size, count = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
        window = int(arg("--window", 8, int))
        tp = Topic(dp, "rt" + tping, UInt8MultiArray_, qos=qos(False))
        tq = Topic(dp, "rt" + tpong, UInt8MultiArray_, qos=qos(False))
        w = DataWriter(dp, tp, qos=qos(False))
        r = DataReader(dp, tq, qos=qos(False, depth=100))
        out(event="ready")
        wait_matched(w, 20.0)
        time.sleep(1.0)
        payload = bytearray(size)
        sent = got = 0
        back = set()
        t_start = last_progress = time.perf_counter()
        while got < count and time.perf_counter() - last_progress < 5.0:
            while sent < count and sent - got < window:
                payload[0:4] = sent.to_bytes(4, "little")
                w.write(UInt8MultiArray_(layout=MultiArrayLayout_(dim=[], data_offset=0), data=bytes(payload)))
                sent += 1
            progressed = False
            for s in r.take(N=32):
                if s.sample_info.valid_data:
                    i = int.from_bytes(bytes(s.data[0:4]), "little")
                    if i not in back:
                        back.add(i)
                        got += 1
                        progressed = True
            if progressed:
                last_progress = time.perf_counter()
            else:
                time.sleep(0.00005)
        wall = (last_progress if got else time.perf_counter()) - t_start
        out(event="summary", size=size, count=count, window=window, sent=sent, received=got, lost=count - got,
            msgs_per_s=got / wall if wall > 0 else None, mb_per_s=got * size / wall / 1e6 if wall > 0 else None)
    elif mode == "discovery":
        # As rmw's graph cache: reliable, transient-local (late joiners get each participant's last sample).
        name = sys.argv[2]
        dq = Qos(Policy.Reliability.Reliable(duration(seconds=1)), Policy.Durability.TransientLocal,
                 Policy.History.KeepLast(1), Policy.DataRepresentation(use_cdrv0_representation=True))
        t = Topic(dp, "ros_discovery_info", ParticipantEntitiesInfo_, qos=dq)
        r = DataReader(dp, t, qos=dq)
        out(event="ready")
        end = time.time() + arg("--timeout", 20.0)
        seen = []
        while time.time() < end:
            for s in r.take(N=10):
                if not s.sample_info.valid_data:
                    continue
                # The bytes must also be a ParticipantEntitiesInfo for rosbags' copy of rmw_dds_common's .msg.
                ref = TS.deserialize_cdr(s.serialize(), "rmw_dds_common/msg/ParticipantEntitiesInfo")
                for n in ref.node_entities_info_seq:
                    seen.append(n.node_name)
                    if n.node_name == name:
                        out(event="node", namespace=n.node_namespace, name=n.node_name,
                            participant_gid=bytes(ref.gid.data).hex(), readers=len(n.reader_gid_seq),
                            writers=len(n.writer_gid_seq))
                        return
            time.sleep(0.05)
        out(event="error", message=f"no node {name} in ros_discovery_info within the timeout; seen: {seen}")
        sys.exit(2)
    elif mode == "srv_server":
        kind, service = sys.argv[2], sys.argv[3]
        r, w = srv_endpoints(dp, kind, service, server=True)
        delay = arg("--delay-ms", 0.0) / 1000.0
        out(event="ready")
        served, end = 0, time.time() + arg("--timeout", 60.0)
        while time.time() < end:
            got = r.take(N=10)
            if not got:
                time.sleep(0.0002)
                continue
            for s in got:
                if not s.sample_info.valid_data:
                    continue
                if delay:
                    time.sleep(delay)
                w.write(srv_response(kind, s))
                served += 1
                out(event="served", seq=s.seq)
        out(event="summary", served=served)
    elif mode == "srv_client":
        kind, service, count = sys.argv[2], sys.argv[3], int(sys.argv[4])
        r, w = srv_endpoints(dp, kind, service, server=False)
        timeout = arg("--timeout-ms", 5000.0) / 1000.0
        out(event="ready")
        end = time.time() + 20.0
        while not (has_matches(w.get_matched_subscriptions) and has_matches(r.get_matched_publications)):
            if time.time() > end:
                out(event="error", message=f"no server of {service} matched")
                sys.exit(2)
            time.sleep(0.05)
        time.sleep(0.3)  # let the server's side of discovery settle
        client = 0x5EED_0000_0000_0001
        answered, intact, timed_out, bad, rtts = 0, 0, 0, [], []
        for i in range(1, count + 1):
            req = srv_request(kind, i, client)
            want = srv_response(kind, req).serialize()
            t0 = time.perf_counter()
            w.write(req)
            got = None
            while got is None and time.perf_counter() - t0 < timeout:
                for s in r.take(N=10):
                    if s.sample_info.valid_data and s.client == client and s.seq == i:
                        got = s
                if got is None:
                    time.sleep(0.00005)
            if got is None:
                timed_out += 1
                continue
            rtts.append((time.perf_counter() - t0) * 1e6)
            answered += 1
            if got.serialize() == want:
                intact += 1
            else:
                bad.append(i)
        rtts.sort()
        pct = lambda p: rtts[min(len(rtts) - 1, int(p * len(rtts)))] if rtts else None
        out(event="summary", calls=count, answered=answered, intact=intact, bad=bad[:10], timed_out=timed_out,
            p50_us=pct(0.5), p99_us=pct(0.99))
    elif mode == "action_server":
        # Only the endpoints of an action server that discovery shows (its goal service and status topic), for
        # the bridge to list the action as not bridged.
        name = sys.argv[2]
        t = Topic(dp, f"rq{name}/_action/send_goalRequest", Fibonacci_SendGoal_Request_, qos=qos(False))
        r = DataReader(dp, t, qos=qos(False))
        st = Topic(dp, f"rt{name}/_action/status", GoalStatusArray_, qos=qos(False))
        w = DataWriter(dp, st, qos=qos(False))
        out(event="ready")
        time.sleep(arg("--timeout", 20.0))
        out(event="summary", held=[r is not None, w is not None])
    elif mode == "oracle":
        passed, failed = 0, []
        for line in open(sys.argv[2]):
            kind, i, size, hexs = line.split()
            mine = bytes.fromhex(hexs)
            ref = cdr(kind, int(i), int(size))
            ok = mine == ref
            # rosbags must also read the bridge's bytes back into the same message.
            back = TS.serialize_cdr(TS.deserialize_cdr(mine, ROSNAME[kind]), ROSNAME[kind])
            ok = ok and bytes(back) == ref
            if ok:
                passed += 1
            else:
                failed.append({"kind": kind, "len": len(mine), "ref_len": len(ref),
                               "first_diff": next((k for k, (a, b) in enumerate(zip(mine, ref)) if a != b), None)})
        out(event="summary", passed=passed, failed=failed)
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
