// A single-node Hadoop cluster in one JVM: HDFS (NameNode + DataNode) and YARN
// (ResourceManager + NodeManager), from Hadoop's own test artifacts on Maven Central.
//
//   java -cp "$(cat classpath.txt)" MiniCluster.java <work dir> <client conf dir>
//
// Started and stopped by deploy/yarn/minicluster.sh. Once both services are up it writes a
// client configuration (core-site.xml, hdfs-site.xml, yarn-site.xml) into <client conf dir>,
// with the addresses the services really listen on, and then the file READY. It runs until
// killed (SIGTERM stops both services).
import java.io.File;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.file.Files;
import java.nio.file.StandardCopyOption;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.MiniYARNCluster;

public class MiniCluster {
  public static void main(String[] args) throws Exception {
    File work = new File(args[0]).getAbsoluteFile();
    File client = new File(args[1]).getAbsoluteFile();
    int memoryMb = Integer.parseInt(System.getenv().getOrDefault("MINICLUSTER_MEMORY_MB", "6144"));
    int vcores = Integer.parseInt(System.getenv().getOrDefault("MINICLUSTER_VCORES", "4"));
    int nnPort = Integer.parseInt(System.getenv().getOrDefault("MINICLUSTER_NAMENODE_PORT", "0"));

    Configuration conf = new Configuration();
    conf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, new File(work, "hdfs").getPath());
    conf.set("dfs.replication", "1");
    conf.set("dfs.permissions.enabled", "true");
    MiniDFSCluster dfs = new MiniDFSCluster.Builder(conf)
        .numDataNodes(1).nameNodePort(nnPort).format(true).build();
    dfs.waitActive();
    String defaultFs = dfs.getFileSystem().getUri().toString();

    YarnConfiguration yarnConf = new YarnConfiguration(conf);
    yarnConf.set(YarnConfiguration.FS_BASED_RM_CONF_STORE, new File(work, "rm").getPath());
    yarnConf.set("fs.defaultFS", defaultFs);
    yarnConf.set(YarnConfiguration.RM_SCHEDULER,
        "org.apache.hadoop.yarn.server.resourcemanager.scheduler.fifo.FifoScheduler");
    yarnConf.setInt(YarnConfiguration.NM_PMEM_MB, memoryMb);
    yarnConf.setInt(YarnConfiguration.NM_VCORES, vcores);
    yarnConf.setInt(YarnConfiguration.RM_SCHEDULER_MINIMUM_ALLOCATION_MB, 256);
    yarnConf.setInt(YarnConfiguration.RM_SCHEDULER_MAXIMUM_ALLOCATION_MB, memoryMb);
    yarnConf.setBoolean(YarnConfiguration.NM_PMEM_CHECK_ENABLED, false);
    yarnConf.setBoolean(YarnConfiguration.NM_VMEM_CHECK_ENABLED, false);
    // The NodeManager's health check refuses a disk above 90% full; a shared build disk is often.
    yarnConf.setFloat(
        YarnConfiguration.NM_MAX_PER_DISK_UTILIZATION_PERCENTAGE, 99.9f);
    MiniYARNCluster yarn = new MiniYARNCluster("medallion", 1, 1, 1);
    yarn.init(yarnConf);
    yarn.start();
    if (!yarn.waitForNodeManagersToConnect(60_000)) {
      throw new IllegalStateException("expected the NodeManager to register within 60 s, it did not");
    }
    Configuration live = yarn.getConfig();

    client.mkdirs();
    Configuration core = new Configuration(false);
    core.set("fs.defaultFS", defaultFs);
    write(core, new File(client, "core-site.xml"));
    Configuration hdfs = new Configuration(false);
    hdfs.set("dfs.replication", "1");
    write(hdfs, new File(client, "hdfs-site.xml"));
    Configuration yarnSite = new Configuration(false);
    for (String key : new String[] {
        YarnConfiguration.RM_ADDRESS, YarnConfiguration.RM_SCHEDULER_ADDRESS,
        YarnConfiguration.RM_RESOURCE_TRACKER_ADDRESS, YarnConfiguration.RM_ADMIN_ADDRESS,
        YarnConfiguration.RM_WEBAPP_ADDRESS}) {
      yarnSite.set(key, live.get(key));
    }
    yarnSite.set(YarnConfiguration.RM_SCHEDULER, live.get(YarnConfiguration.RM_SCHEDULER));
    write(yarnSite, new File(client, "yarn-site.xml"));
    Files.writeString(new File(client, "READY").toPath(),
        defaultFs + "\n" + live.get(YarnConfiguration.RM_ADDRESS) + "\n");

    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      yarn.stop();
      dfs.shutdown();
    }));
    Thread.currentThread().join();
  }

  private static void write(Configuration conf, File target) throws IOException {
    File tmp = new File(target.getPath() + ".tmp");
    try (OutputStream out = new FileOutputStream(tmp)) {
      conf.writeXml(out);
    }
    Files.move(tmp.toPath(), target.toPath(), StandardCopyOption.REPLACE_EXISTING,
        StandardCopyOption.ATOMIC_MOVE);
  }
}
