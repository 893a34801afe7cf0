#!/usr/bin/env bash
# Turns an EC2 spot interruption notice into a Ray drain of this node, so Ray Train checkpoints at the
# next step boundary and restarts the group without this node before it goes (docs/pretraining.md,
# "Multi-node and spot instances"). Ray's AWS node provider does not watch for the notice itself.
# Started in the background on every worker node by infra/ray/cluster.yaml's worker_start_ray_commands.
#
#   spot_drain.sh HEAD_IP:6379
set -u
gcs=${1:?usage: spot_drain.sh HEAD_IP:PORT}
imds=http://169.254.169.254/latest
# EC2 terminates the instance 2 minutes after the notice; the drain deadline leaves the last seconds
# to the shutdown itself.
deadline_s=${SPOT_DRAIN_DEADLINE_S:-110}

while :; do
  token=$(curl -s -X PUT "$imds/api/token" -H "X-aws-ec2-metadata-token-ttl-seconds: 300")
  # 404 until a notice is posted; then a JSON body with the action and its time.
  if notice=$(curl -sf -H "X-aws-ec2-metadata-token: $token" "$imds/meta-data/spot/instance-action"); then
    break
  fi
  sleep 5
done

node_id=$(python -c 'import ray; ray.init(address="auto", logging_level="ERROR"); print(ray.get_runtime_context().get_node_id())')
exec ray drain-node --address "$gcs" --node-id "$node_id" --reason DRAIN_NODE_REASON_PREEMPTION \
  --reason-message "EC2 spot interruption notice: $notice" --deadline-remaining-seconds "$deadline_s"
