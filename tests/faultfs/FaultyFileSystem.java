package medallion.faults;

import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;
import java.util.Random;
import java.util.regex.Pattern;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.DelegateToFileSystem;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's local file system under the scheme {@code faulty://}, refusing a seeded fraction of
 * the renames and deletes whose path matches a pattern, with an IOException, as a remote store
 * does when a request fails.
 *
 * <p>Settings: {@code fs.faulty.rate} (the fraction refused, 0 by default), {@code
 * fs.faulty.seed} (of the random sequence, per JVM), {@code fs.faulty.paths} (a regex on the
 * path, by default files under a {@code landing} folder).
 */
public class FaultyFileSystem extends RawLocalFileSystem {
  public static final URI NAME = URI.create("faulty:///");
  private static Random random;
  private double rate;
  private Pattern paths;

  @Override
  public void initialize(URI uri, Configuration conf) throws IOException {
    super.initialize(uri, conf);
    rate = conf.getDouble("fs.faulty.rate", 0.0);
    paths = Pattern.compile(conf.get("fs.faulty.paths", ".*/landing/.*"));
    synchronized (FaultyFileSystem.class) {
      if (random == null) {
        random = new Random(conf.getLong("fs.faulty.seed", 0L));
      }
    }
  }

  @Override
  public URI getUri() {
    return NAME;
  }

  @Override
  public String getScheme() {
    return "faulty";
  }

  /**
   * A status without the local file system's lazy permissions, which it reads through {@code
   * new File(uri)}: a {@code file:} URI only.
   */
  private static FileStatus plain(FileStatus s) {
    boolean dir = s.isDirectory();
    return new FileStatus(s.getLen(), dir, s.getReplication(), s.getBlockSize(),
        s.getModificationTime(), s.getAccessTime(),
        dir ? FsPermission.getDirDefault() : FsPermission.getFileDefault(), "", "", s.getPath());
  }

  @Override
  public FileStatus getFileStatus(Path path) throws IOException {
    return plain(super.getFileStatus(path));
  }

  @Override
  public FileStatus getFileLinkStatus(Path path) throws IOException {
    return plain(super.getFileLinkStatus(path));
  }

  @Override
  public FileStatus[] listStatus(Path path) throws IOException {
    FileStatus[] found = super.listStatus(path);
    for (int i = 0; i < found.length; i++) {
      found[i] = plain(found[i]);
    }
    return found;
  }

  private void refuse(String operation, Path path) throws IOException {
    boolean fail;
    synchronized (FaultyFileSystem.class) {
      fail = rate > 0 && paths.matcher(path.toUri().getPath()).matches()
          && random.nextDouble() < rate;
    }
    if (fail) {
      throw new IOException("injected fault: " + operation + " of " + path + " refused");
    }
  }

  @Override
  public boolean rename(Path src, Path dst) throws IOException {
    refuse("rename", src);
    return super.rename(src, dst);
  }

  @Override
  public boolean delete(Path path, boolean recursive) throws IOException {
    refuse("delete", path);
    return super.delete(path, recursive);
  }

  /** The same store for FileContext (Spark's checkpoints, Delta's log). */
  public static class Fs extends DelegateToFileSystem {
    public Fs(URI uri, Configuration conf) throws IOException, URISyntaxException {
      super(uri, new FaultyFileSystem(), conf, "faulty", false);
    }
  }
}
